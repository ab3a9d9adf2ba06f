"""The scalar helpers of the LLVM kernels, as LLVM IR: numpy's semantics, and vectorisable float32 math.

A kernel written by `minflux.compiler.llvm_backend` calls the helpers its primitives' rows spell
(``call double @minflux_sigmoid_f64(double %v3)``); `definitions` gives the IR of exactly those, and
of the helpers they call in turn, as internal ``alwaysinline`` functions, so LLVM inlines every one
into the element loop, where it vectorises. Each function called that is not defined here is
declared from its call site: an LLVM intrinsic (``@llvm.exp.f64``) or a C library function
(``@tanhf``), which the JIT links from the running process.

The float32 exponential, logarithm and their relatives are the operations of
`minflux.compiler.fastmath` (the vectorisable numba forms) in the same order, so both CPU
compilers give the same bits; their accuracy is stated and tested there. The float64 forms call the
C library, as numpy does for a scalar.

>>> text = definitions("call float @minflux_tanh_f32(float %x)")
>>> "define internal float @minflux_expm1_f32" in text, "@minflux_log_f32" in text
(True, False)
"""
from __future__ import annotations

import re
import struct

import numpy as np

__all__ = ["definitions", "float_literal"]


def float_literal(value: float, float_type: str) -> str:
    """``value`` rounded to ``float_type`` as an LLVM constant (the exact hex form LLVM reads).

    >>> float_literal(0.1, "float32"), float_literal(-0.0, "float64")
    ('0x3FB99999A0000000', '0x8000000000000000')
    """
    if float_type == "float32":
        value = float(np.float32(value))
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", value))[0]


def _c(value: float) -> str:
    return float_literal(value, "float32")


def _float_helpers(t: str, tag: str, s: str) -> dict:
    """numpy's max, min, sign, mod, floor_divide, clip and the C library's exp, log, tanh... in ``t``."""
    libm = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt"}
    helpers = {}
    for name in ("exp", "log", "log1p", "expm1", "tanh"):
        callee = f"{libm[name]}.{tag}" if name in libm else f"{name}{s}"
        helpers[f"minflux_{name}_{tag}"] = f"""
define internal {t} @minflux_{name}_{tag}({t} %x) alwaysinline {{
  %y = call {t} @{callee}({t} %x)
  ret {t} %y
}}"""
    helpers.update({
        f"minflux_max_{tag}": f"""
define internal {t} @minflux_max_{tag}({t} %a, {t} %b) alwaysinline {{
  %ge = fcmp oge {t} %a, %b
  %nan = fcmp uno {t} %a, %a
  %keep = or i1 %ge, %nan
  %y = select i1 %keep, {t} %a, {t} %b
  ret {t} %y
}}""",
        f"minflux_min_{tag}": f"""
define internal {t} @minflux_min_{tag}({t} %a, {t} %b) alwaysinline {{
  %le = fcmp ole {t} %a, %b
  %nan = fcmp uno {t} %a, %a
  %keep = or i1 %le, %nan
  %y = select i1 %keep, {t} %a, {t} %b
  ret {t} %y
}}""",
        f"minflux_clip_{tag}": f"""
define internal {t} @minflux_clip_{tag}({t} %x, {t} %lo, {t} %hi) alwaysinline {{
  %m = call {t} @minflux_max_{tag}({t} %x, {t} %lo)
  %y = call {t} @minflux_min_{tag}({t} %m, {t} %hi)
  ret {t} %y
}}""",
        f"minflux_sign_{tag}": f"""
define internal {t} @minflux_sign_{tag}({t} %x) alwaysinline {{
  %pos = fcmp ogt {t} %x, 0.0
  %neg = fcmp olt {t} %x, 0.0
  %zero = fcmp oeq {t} %x, 0.0
  %a = select i1 %zero, {t} 0.0, {t} %x
  %b = select i1 %neg, {t} -1.0, {t} %a
  %y = select i1 %pos, {t} 1.0, {t} %b
  ret {t} %y
}}""",
        f"minflux_mod_{tag}": f"""
define internal {t} @minflux_mod_{tag}({t} %a, {t} %b) alwaysinline {{
  %m = frem {t} %a, %b
  %bneg = fcmp olt {t} %b, 0.0
  %mneg = fcmp olt {t} %m, 0.0
  %differ = xor i1 %bneg, %mneg
  %nonzero = fcmp une {t} %m, 0.0
  %fix = and i1 %differ, %nonzero
  %shifted = fadd {t} %m, %b
  %m1 = select i1 %fix, {t} %shifted, {t} %m
  %signed0 = call {t} @llvm.copysign.{tag}({t} 0.0, {t} %b)
  %m2 = select i1 %nonzero, {t} %m1, {t} %signed0
  %bzero = fcmp oeq {t} %b, 0.0
  %y = select i1 %bzero, {t} %m, {t} %m2
  ret {t} %y
}}""",
        f"minflux_floordiv_{tag}": f"""
define internal {t} @minflux_floordiv_{tag}({t} %a, {t} %b) alwaysinline {{
  %q = fdiv {t} %a, %b
  %m = frem {t} %a, %b
  %am = fsub {t} %a, %m
  %div0 = fdiv {t} %am, %b
  %bneg = fcmp olt {t} %b, 0.0
  %mneg = fcmp olt {t} %m, 0.0
  %differ = xor i1 %bneg, %mneg
  %nonzero = fcmp une {t} %m, 0.0
  %fix = and i1 %differ, %nonzero
  %down = fsub {t} %div0, 1.0
  %div = select i1 %fix, {t} %down, {t} %div0
  %fl0 = call {t} @llvm.floor.{tag}({t} %div)
  %frac = fsub {t} %div, %fl0
  %up = fcmp ogt {t} %frac, 0.5
  %fl1 = fadd {t} %fl0, 1.0
  %fl = select i1 %up, {t} %fl1, {t} %fl0
  %signed0 = call {t} @llvm.copysign.{tag}({t} 0.0, {t} %q)
  %divzero = fcmp oeq {t} %div, 0.0
  %r = select i1 %divzero, {t} %signed0, {t} %fl
  %bzero = fcmp oeq {t} %b, 0.0
  %y = select i1 %bzero, {t} %q, {t} %r
  ret {t} %y
}}""",
    })
    return helpers


_FLOAT64 = _float_helpers("double", "f64", "")
_FLOAT64.update({
    "minflux_sigmoid_f64": """
define internal double @minflux_sigmoid_f64(double %x) alwaysinline {
  %a = call double @llvm.fabs.f64(double %x)
  %na = fneg double %a
  %e = call double @llvm.exp.f64(double %na)
  %pos = fcmp oge double %x, 0.0
  %num = select i1 %pos, double 1.0, double %e
  %den = fadd double 1.0, %e
  %y = fdiv double %num, %den
  ret double %y
}""",
    "minflux_softplus_f64": """
define internal double @minflux_softplus_f64(double %x) alwaysinline {
  %gt = fcmp ogt double 0.0, %x
  %m = select i1 %gt, double 0.0, double %x
  %a = call double @llvm.fabs.f64(double %x)
  %na = fneg double %a
  %e = call double @llvm.exp.f64(double %na)
  %l = call double @log1p(double %e)
  %y = fadd double %m, %l
  ret double %y
}""",
})

_FLOAT32 = {**_float_helpers("float", "f32", "f"), **{
    # the integer n of x = n ln2 + r sits in the low mantissa bits of t = x log2(e) + 1.5 2**23
    "minflux_scale_f32": """
define internal float @minflux_scale_f32(float %p, float %t) alwaysinline {
  %bits = bitcast float %t to i32
  %n = sub i32 %bits, 1262485504
  %h = ashr i32 %n, 1
  %ha = add i32 %h, 127
  %hs = shl i32 %ha, 23
  %a = bitcast i32 %hs to float
  %nh = sub i32 %n, %h
  %nb = add i32 %nh, 127
  %ns = shl i32 %nb, 23
  %b = bitcast i32 %ns to float
  %pa = fmul float %p, %a
  %y = fmul float %pa, %b
  ret float %y
}""",
    "minflux_expm1_poly_f32": f"""
define internal float @minflux_expm1_poly_f32(float %r) alwaysinline {{
  %p1 = fmul float {_c(1 / 40320)}, %r
  %p2 = fadd float %p1, {_c(1 / 5040)}
  %p3 = fmul float %p2, %r
  %p4 = fadd float %p3, {_c(1 / 720)}
  %p5 = fmul float %p4, %r
  %p6 = fadd float %p5, {_c(1 / 120)}
  %p7 = fmul float %p6, %r
  %p8 = fadd float %p7, {_c(1 / 24)}
  %p9 = fmul float %p8, %r
  %p10 = fadd float %p9, {_c(1 / 6)}
  %p11 = fmul float %p10, %r
  %p = fadd float %p11, 0.5
  %rr = fmul float %r, %r
  %rrp = fmul float %rr, %p
  %y = fadd float %r, %rrp
  ret float %y
}}""",
    # x clamped to [-104, 89], then (t, k, r) of x = k ln2 + r as `fastmath._reduce` splits it
    "minflux_reduce_f32": f"""
define internal {{float, float, float}} @minflux_reduce_f32(float %x0) alwaysinline {{
  %lo = fcmp olt float %x0, -104.0
  %x1 = select i1 %lo, float -104.0, float %x0
  %hi = fcmp ogt float %x1, 89.0
  %x = select i1 %hi, float 89.0, float %x1
  %xl = fmul float %x, {_c(1.4426950408889634)}
  %t = fadd float %xl, 12582912.0
  %k = fsub float %t, 12582912.0
  %kh = fmul float %k, {_c(0.693145751953125)}
  %xr = fsub float %x, %kh
  %kl = fmul float %k, {_c(1.4286067653e-06)}
  %r = fsub float %xr, %kl
  %v0 = insertvalue {{float, float, float}} undef, float %t, 0
  %v1 = insertvalue {{float, float, float}} %v0, float %k, 1
  %v = insertvalue {{float, float, float}} %v1, float %r, 2
  ret {{float, float, float}} %v
}}""",
    "minflux_exp_f32": """
define internal float @minflux_exp_f32(float %x) alwaysinline {
  %v = call {float, float, float} @minflux_reduce_f32(float %x)
  %t = extractvalue {float, float, float} %v, 0
  %r = extractvalue {float, float, float} %v, 2
  %p = call float @minflux_expm1_poly_f32(float %r)
  %p1 = fadd float %p, 1.0
  %y = call float @minflux_scale_f32(float %p1, float %t)
  ret float %y
}""",
    "minflux_expm1_f32": """
define internal float @minflux_expm1_f32(float %x0) alwaysinline {
  %lo = fcmp olt float %x0, -104.0
  %x1 = select i1 %lo, float -104.0, float %x0
  %hi = fcmp ogt float %x1, 89.0
  %x = select i1 %hi, float 89.0, float %x1
  %v = call {float, float, float} @minflux_reduce_f32(float %x)
  %t = extractvalue {float, float, float} %v, 0
  %k = extractvalue {float, float, float} %v, 1
  %r = extractvalue {float, float, float} %v, 2
  %p = call float @minflux_expm1_poly_f32(float %r)
  %s = call float @minflux_scale_f32(float 1.0, float %t)
  %sp = fmul float %s, %p
  %s1 = fsub float %s, 1.0
  %medium = fadd float %sp, %s1
  %p1 = fadd float %p, 1.0
  %big = call float @minflux_scale_f32(float %p1, float %t)
  %large = fsub float %big, 1.0
  %poly = call float @minflux_expm1_poly_f32(float %x)
  %xzero = fcmp oeq float %x, 0.0
  %small = select i1 %xzero, float %x, float %poly
  %kbig = fcmp ogt float %k, 32.0
  %y = select i1 %kbig, float %large, float %medium
  %ax = call float @llvm.fabs.f32(float %x)
  %near = fcmp olt float %ax, 0x3FD3333340000000
  %z = select i1 %near, float %small, float %y
  ret float %z
}""",
    "minflux_log_f32": f"""
define internal float @minflux_log_f32(float %x) alwaysinline {{
  %tiny = fcmp olt float %x, {_c(1.17549435e-38)}
  %xbig = fmul float %x, 8388608.0
  %xs = select i1 %tiny, float %xbig, float %x
  %bits = bitcast float %xs to i32
  %eb = lshr i32 %bits, 23
  %em = and i32 %eb, 255
  %ei = sub i32 %em, 127
  %e0 = sitofp i32 %ei to float
  %mb = and i32 %bits, 8388607
  %mo = or i32 %mb, 1065353216
  %m0 = bitcast i32 %mo to float
  %big = fcmp ogt float %m0, {_c(1.41421356)}
  %mh = fmul float %m0, 0.5
  %m = select i1 %big, float %mh, float %m0
  %e1p = fadd float %e0, 1.0
  %e1 = select i1 %big, float %e1p, float %e0
  %e2m = fsub float %e1, 23.0
  %e = select i1 %tiny, float %e2m, float %e1
  %num = fsub float %m, 1.0
  %den = fadd float %m, 1.0
  %f = fdiv float %num, %den
  %f2 = fmul float %f, %f
  %q1 = fmul float {_c(2 / 9)}, %f2
  %q2 = fadd float %q1, {_c(2 / 7)}
  %q3 = fmul float %q2, %f2
  %q4 = fadd float %q3, {_c(2 / 5)}
  %q5 = fmul float %q4, %f2
  %q = fadd float %q5, {_c(2 / 3)}
  %f2f = fmul float 2.0, %f
  %ff2 = fmul float %f, %f2
  %ff2q = fmul float %ff2, %q
  %lm = fadd float %f2f, %ff2q
  %eh = fmul float %e, {_c(0.693145751953125)}
  %el = fmul float %e, {_c(1.4286067653e-06)}
  %lmel = fadd float %lm, %el
  %y0 = fadd float %eh, %lmel
  %neg = fcmp olt float %x, 0.0
  %y1 = select i1 %neg, float 0x7FF8000000000000, float %y0
  %zero = fcmp oeq float %x, 0.0
  %y2 = select i1 %zero, float 0xFFF0000000000000, float %y1
  %inf = fcmp oeq float %x, 0x7FF0000000000000
  %y3 = select i1 %inf, float %x, float %y2
  %isnan = fcmp une float %x, %x
  %yn = fadd float %y3, %x
  %y = select i1 %isnan, float %yn, float %y3
  ret float %y
}}""",
    "minflux_log1p_f32": """
define internal float @minflux_log1p_f32(float %x) alwaysinline {
  %u = fadd float 1.0, %x
  %d = fsub float %u, 1.0
  %y = call float @minflux_log_f32(float %u)
  %dx = fsub float %d, %x
  %dxu = fdiv float %dx, %u
  %c0 = fsub float %y, %dxu
  %dzero = fcmp oeq float %d, 0.0
  %c = select i1 %dzero, float %x, float %c0
  %uinf = fcmp oeq float %u, 0x7FF0000000000000
  %uzero = fcmp oeq float %u, 0.0
  %edge = or i1 %uinf, %uzero
  %z = select i1 %edge, float %y, float %c
  ret float %z
}""",
    "minflux_tanh_f32": """
define internal float @minflux_tanh_f32(float %x) alwaysinline {
  %a0 = call float @llvm.fabs.f32(float %x)
  %sat = fcmp ogt float %a0, 9.5
  %a = select i1 %sat, float 9.5, float %a0
  %a2 = fmul float 2.0, %a
  %t = call float @minflux_expm1_f32(float %a2)
  %t2 = fadd float %t, 2.0
  %y0 = fdiv float %t, %t2
  %y1 = call float @llvm.copysign.f32(float %y0, float %x)
  %isnan = fcmp une float %x, %x
  %yn = fadd float %y1, %x
  %y = select i1 %isnan, float %yn, float %y1
  ret float %y
}""",
    "minflux_sigmoid_f32": """
define internal float @minflux_sigmoid_f32(float %x) alwaysinline {
  %a = call float @llvm.fabs.f32(float %x)
  %na = fneg float %a
  %e = call float @minflux_exp_f32(float %na)
  %pos = fcmp oge float %x, 0.0
  %num = select i1 %pos, float 1.0, float %e
  %den = fadd float 1.0, %e
  %y = fdiv float %num, %den
  ret float %y
}""",
    "minflux_softplus_f32": """
define internal float @minflux_softplus_f32(float %x) alwaysinline {
  %gt = fcmp ogt float %x, 0.0
  %m = select i1 %gt, float %x, float 0.0
  %a = call float @llvm.fabs.f32(float %x)
  %na = fneg float %a
  %e = call float @minflux_exp_f32(float %na)
  %l = call float @minflux_log1p_f32(float %e)
  %y = fadd float %m, %l
  ret float %y
}""",
}}

_INT64 = {
    "minflux_floordiv_i64": """
define internal i64 @minflux_floordiv_i64(i64 %a, i64 %b) alwaysinline {
entry:
  %bzero = icmp eq i64 %b, 0
  br i1 %bzero, label %zero, label %nonzero
zero:
  ret i64 0
nonzero:
  %bminus = icmp eq i64 %b, -1
  br i1 %bminus, label %negate, label %divide
negate:
  %n = sub i64 0, %a
  ret i64 %n
divide:
  %q = sdiv i64 %a, %b
  %r = srem i64 %a, %b
  %rnz = icmp ne i64 %r, 0
  %aneg = icmp slt i64 %a, 0
  %bneg = icmp slt i64 %b, 0
  %differ = xor i1 %aneg, %bneg
  %fix = and i1 %rnz, %differ
  %q1 = sub i64 %q, 1
  %y = select i1 %fix, i64 %q1, i64 %q
  ret i64 %y
}""",
    "minflux_mod_i64": """
define internal i64 @minflux_mod_i64(i64 %a, i64 %b) alwaysinline {
entry:
  %bzero = icmp eq i64 %b, 0
  %bminus = icmp eq i64 %b, -1
  %trivial = or i1 %bzero, %bminus
  br i1 %trivial, label %zero, label %divide
zero:
  ret i64 0
divide:
  %r = srem i64 %a, %b
  %rnz = icmp ne i64 %r, 0
  %rneg = icmp slt i64 %r, 0
  %bneg = icmp slt i64 %b, 0
  %differ = xor i1 %rneg, %bneg
  %fix = and i1 %rnz, %differ
  %rb = add i64 %r, %b
  %y = select i1 %fix, i64 %rb, i64 %r
  ret i64 %y
}""",
    "minflux_abs_i64": """
define internal i64 @minflux_abs_i64(i64 %a) alwaysinline {
  %neg = icmp slt i64 %a, 0
  %n = sub i64 0, %a
  %y = select i1 %neg, i64 %n, i64 %a
  ret i64 %y
}""",
    "minflux_sign_i64": """
define internal i64 @minflux_sign_i64(i64 %a) alwaysinline {
  %pos = icmp sgt i64 %a, 0
  %neg = icmp slt i64 %a, 0
  %p = zext i1 %pos to i64
  %n = zext i1 %neg to i64
  %y = sub i64 %p, %n
  ret i64 %y
}""",
    "minflux_clip_i64": """
define internal i64 @minflux_clip_i64(i64 %x, i64 %lo, i64 %hi) alwaysinline {
  %m = call i64 @llvm.smax.i64(i64 %x, i64 %lo)
  %y = call i64 @llvm.smin.i64(i64 %m, i64 %hi)
  ret i64 %y
}""",
}

HELPERS = {**_FLOAT64, **_FLOAT32, **_INT64}
_CALL = re.compile(r"call ([^@]+?) @([\w.]+)\(([^)]*)\)")
_DEFINE = re.compile(r"^define [^@]*@([\w.]+)\(", re.M)


def _argument_types(arguments: str) -> str:
    types = []
    for argument in filter(None, (a.strip() for a in arguments.split(","))):
        types.append(argument.rsplit(" ", 1)[0])
    return ", ".join(types)


def definitions(code: str) -> str:
    """The IR that ``code`` needs: the helpers it calls (and theirs), and declarations of the
    intrinsics and C functions they all call."""
    defined: dict = {}
    declared: dict = dict.fromkeys(_DEFINE.findall(code), "")   # its own functions
    pending = [code]
    while pending:
        for result, name, arguments in _CALL.findall(pending.pop()):
            if name in defined or name in declared:
                continue
            if name in HELPERS:
                defined[name] = HELPERS[name]
                pending.append(HELPERS[name])
            else:
                declared[name] = f"declare {result.strip()} @{name}({_argument_types(arguments)})"
    return "\n".join(filter(None, [*declared.values(), *defined.values()])) + "\n"
