"""CUDA C from the scalar-function compiler's typed IR: one scalar device function per kernel.

The IR (`minflux.compiler.ir`, after `minflux.compiler.kinds.infer_kinds`, and after the dual
transform for a gradient kernel) is printed statement by statement: every variable becomes a local
of its kind (``bool``, ``long long`` or the kernel's float type), ``If`` becomes a real ``if``,
``Loop`` a ``for (;;)`` whose ``Break`` / ``Continue`` jump to labels (``Continue`` must run the
loop's latch), ``Return`` stores the outputs through pointers and returns. Dual variables are plain
locals, so they live in registers. The result is a function

    static __device__ __forceinline__ void NAME(T0 in0, T1 in1, ..., U0 *out0, U1 *out1, ...)

that a CuPy ``ElementwiseKernel`` calls once per element (CuPy does the broadcasting), and that a C
compiler accepts after the C shim of the test suite (`tests/compiler/cuda_shim.py`, which defines the few CUDA spellings
used) so the same text is tested on the CPU.

Semantics follow numpy, the reference backend: ``maximum``/``minimum``/``clip``/``relu`` propagate
NaN, ``mod`` and ``floor_divide`` use Python's sign convention (numpy's ``divmod`` algorithm for
floats), integer arithmetic wraps, comparisons between different kinds are made in double precision.

Accuracy of the float32 functions (CUDA C++ Programming Guide, "Mathematical Functions" appendix):
by default every function is the CUDA math library's accurate one (``expf``, ``logf``,
``tanhf``, ``log1pf``, ``expm1f``, ``sinf``, ``cosf``: at most 1-2 ulp; ``sqrtf`` and division
correctly rounded), and ``sigmoid``/``softplus`` are built from them in a cancellation-free form
(within 4 ulp). With ``fast_math=True`` (``MINFLUX_CUDA_FAST_MATH=1``) the hardware intrinsics
replace them where the guide documents their error: ``__expf`` (at most ``2 + floor(|1.173 x|)`` ulp),
``__logf`` (absolute error at most ``2**-21.41`` on [0.5, 2], else 3 ulp) and ``__fdividef`` (2 ulp
for ``2**-126 <= |y| <= 2**126``); float64 kernels never use intrinsics.

>>> from minflux.compiler.ir import Function, Assign, Call, Var, Const, Return
>>> from minflux.compiler.kinds import infer_kinds
>>> f = infer_kinds(Function("axpy", ["a", "x"], [Assign("t", Call("multiply", (Var("a"), Var("x")))),
...     Assign("u", Call("add", (Var("t"), Const(1.0)))), Return((Var("u"),))], temps={"t", "u"}),
...     ["f", "f"])
>>> print(generate(f, "float32", name="axpy").function)
static __device__ __forceinline__ void axpy(float in0, float in1, float *out0) {
    float m_a = in0;
    float m_x = in1;
    float m_t = 0;
    float m_u = 0;
    m_t = (m_a * m_x);
    m_u = (m_t + 1.0f);
    *out0 = m_u;
    return;
}
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass, field

from .errors import CompileError
from .ir import COMPARISONS, Assign, Break, Call, Const, Continue, Function, If, Loop, Return
from .rules import TABLE

__all__ = ["CKernel", "HELPERS", "c_type", "generate", "supported_primitives"]

_FLOAT_TYPES = {"float32": ("float", "f"), "float64": ("double", "")}


def c_type(kind: str, float_type: str) -> str:
    """The C type of an IR kind (``"b"``, ``"i"``, ``"f"``) in a kernel of ``float_type``.

    >>> c_type("i", "float32"), c_type("f", "float64")
    ('long long', 'double')
    """
    if kind == "b":
        return "bool"
    if kind == "i":
        return "long long"
    if kind == "f":
        return _FLOAT_TYPES[float_type][0]
    raise ValueError(f"unknown IR kind {kind!r}")


# -- helper functions shared by all kernels (CUDA C that is also C99 under the shim) -----------------

def _float_helpers(t: str, s: str, tag: str) -> str:
    return f"""
static __device__ __forceinline__ {t} minflux_max_{tag}({t} a, {t} b) {{ return (a >= b || a != a) ? a : b; }}
static __device__ __forceinline__ {t} minflux_min_{tag}({t} a, {t} b) {{ return (a <= b || a != a) ? a : b; }}
static __device__ __forceinline__ {t} minflux_sign_{tag}({t} x) {{ return x > 0 ? ({t})1 : (x < 0 ? ({t})-1 : x); }}
static __device__ __forceinline__ {t} minflux_mod_{tag}({t} a, {t} b) {{
    {t} m = fmod{s}(a, b);
    if (b == 0) return m;
    if (m != 0) {{ if ((b < 0) != (m < 0)) m += b; }}
    else m = copysign{s}(({t})0, b);
    return m;
}}
static __device__ __forceinline__ {t} minflux_floordiv_{tag}({t} a, {t} b) {{
    {t} m, div, fl;
    if (b == 0) return a / b;
    m = fmod{s}(a, b);
    div = (a - m) / b;
    if (m != 0 && ((b < 0) != (m < 0))) div -= 1;
    if (div != 0) {{ fl = floor{s}(div); if (div - fl > ({t})0.5) fl += 1; }}
    else fl = copysign{s}(({t})0, a / b);
    return fl;
}}
static __device__ __forceinline__ {t} minflux_sigmoid_{tag}({t} x) {{
    {t} e = exp{s}(-fabs{s}(x));
    return (x >= 0 ? ({t})1 : e) / (({t})1 + e);
}}
static __device__ __forceinline__ {t} minflux_softplus_{tag}({t} x) {{
    if (x != x) return x;
    return (x > 0 ? x : ({t})0) + log1p{s}(exp{s}(-fabs{s}(x)));
}}
"""


_FAST_HELPERS = """
static __device__ __forceinline__ float minflux_fast_sigmoid_f32(float x) {
    float e = __expf(-fabsf(x));
    return __fdividef(x >= 0 ? 1.0f : e, 1.0f + e);
}
"""

_INT_HELPERS = """
static __device__ __forceinline__ long long minflux_wrap_i64(unsigned long long u) { return (long long)u; }
static __device__ __forceinline__ long long minflux_floordiv_i64(long long a, long long b) {
    long long q;
    if (b == 0) return 0;
    if (b == -1) return minflux_wrap_i64(0ULL - (unsigned long long)a);
    q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) q -= 1;
    return q;
}
static __device__ __forceinline__ long long minflux_mod_i64(long long a, long long b) {
    long long r;
    if (b == 0 || b == -1) return 0;
    r = a % b;
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static __device__ __forceinline__ long long minflux_abs_i64(long long a) {
    return a < 0 ? minflux_wrap_i64(0ULL - (unsigned long long)a) : a;
}
static __device__ __forceinline__ long long minflux_sign_i64(long long a) { return (a > 0) - (a < 0); }
"""

HELPERS = ("/* minflux elementwise helpers: numpy semantics for the derivative table's primitives */"
           + _float_helpers("float", "f", "f32") + _float_helpers("double", "", "f64") + _FAST_HELPERS
           + _INT_HELPERS)


# -- expressions -------------------------------------------------------------------------------------

def _float_literal(value: float, float_type: str) -> str:
    if math.isnan(value) or math.isinf(value):
        if float_type == "float32":
            bits = struct.unpack("<I", struct.pack("<f", value))[0]
            return f"__int_as_float(0x{bits:08x})"
        bits = struct.unpack("<q", struct.pack("<d", value))[0]
        return f"__longlong_as_double({bits}LL)"
    text = repr(float(value))
    if "e" not in text and "." not in text:
        text += ".0"
    return text + "f" if float_type == "float32" else text


def _const(value, float_type: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -2**63 <= value < 2**63:
            raise CompileError(f"the integer constant {value} does not fit in 64 bits")
        return f"({value}LL)" if value != -2**63 else "(-9223372036854775807LL - 1)"
    return _float_literal(value, float_type)


def supported_primitives() -> set:
    """The primitives of the derivative table that the CUDA backend prints (their rows spell them).

    >>> {"tanh", "where", "sigmoid"} <= supported_primitives()
    True
    """
    return {name for name, prim in TABLE.items() if prim.cuda is not None}


class _Printer:
    """Prints one typed IR function (or subroutine) as a C function."""

    def __init__(self, fn: Function, float_type: str, fast_math: bool, subroutine_names: dict,
                 loc_hint: str):
        self.fn = fn
        self.float_type = float_type
        self.fast = fast_math and float_type == "float32"
        self.subroutine_names = subroutine_names
        self.names: dict[str, str] = {}
        self.loops = 0
        self.loop_stack: list[int] = []
        self.loc_hint = loc_hint
        self.ctype = lambda kind: c_type(kind, float_type)
        self.tag = "f32" if float_type == "float32" else "f64"
        self.sfx = _FLOAT_TYPES[float_type][1]

    def name(self, ir_name: str) -> str:
        c = self.names.get(ir_name)
        if c is None:
            base = "m_" + re.sub(r"\W", "_", ir_name)
            c = base
            n = 1
            while c in self.names.values():
                c = f"{base}_{n}"
                n += 1
            self.names[ir_name] = c
        return c

    def kind(self, atom) -> str:
        if isinstance(atom, Const):
            return atom.kind
        return self.fn.kinds[atom.name]

    def atom(self, atom) -> str:
        if isinstance(atom, Const):
            return _const(atom.value, self.float_type)
        return self.name(atom.name)

    def call(self, call: Call, target_kind: str) -> str:
        op, args = call.op, call.args
        a = [self.atom(x) for x in args]
        kinds = [self.kind(x) for x in args]
        t, tag, sfx = self.ctype("f"), self.tag, self.sfx
        if op in self.subroutine_names:
            raise AssertionError("subroutine calls are statements")  # handled in assign()
        if op == "float":
            return f"(({t})({a[0]}))"
        if op == "int":
            return f"((long long)({a[0]}))"
        prim = TABLE.get(op)
        if prim is None:
            raise self.unsupported(op)
        if op in COMPARISONS and kinds[0] != kinds[1]:
            a = list(self.comparison_operands(args, kinds, *a))
        if prim.result in ("bool", "where"):
            spelling = prim.cuda
        elif target_kind == "f":
            spelling = prim.cuda_fast32 if self.fast and prim.cuda_fast32 else prim.cuda
        else:
            spelling = prim.cuda_int
        if spelling is None:
            raise self.unsupported(op)
        return spelling.format(*a, t=t, tag=tag, s=sfx)

    def comparison_operands(self, args, kinds, left: str, right: str) -> tuple:
        """Operands of a comparison between kinds: numpy compares them in double precision.

        An integer constant that the float type holds exactly compares the same way in that type,
        which avoids double-precision instructions in the common ``z == 1`` test.
        """
        exact = 2**24 if self.float_type == "float32" else 2**53
        for i in (0, 1):
            const, other = args[i], kinds[1 - i]
            if isinstance(const, Const) and other == "f" and abs(int(const.value)) <= exact:
                text = _float_literal(float(const.value), self.float_type)
                return (text, right) if i == 0 else (left, text)
        return f"(double)({left})", f"(double)({right})"

    def unsupported(self, op) -> CompileError:
        return CompileError(f"the CUDA backend has no C form for the primitive {op!r} in {self.loc_hint}; "
                            "give its row one (define(..., cuda='...') in minflux.compiler.rules), or "
                            "define the function with mf.scalar_rule (whose primal body is compiled)",
                            None, op)

    # -- statements ---------------------------------------------------------------------------------
    def block(self, stmts: list, indent: str, out: list) -> None:
        for s in stmts:
            if isinstance(s, Assign):
                self.assign(s, indent, out)
            elif isinstance(s, If):
                out.append(f"{indent}if ({self.atom(s.cond)}) {{")
                self.block(s.body, indent + "    ", out)
                if s.orelse:
                    out.append(f"{indent}}} else {{")
                    self.block(s.orelse, indent + "    ", out)
                out.append(f"{indent}}}")
            elif isinstance(s, Loop):
                n = self.loops
                self.loops += 1
                self.loop_stack.append(n)
                out.append(f"{indent}for (;;) {{")
                self.block(s.body, indent + "    ", out)
                out.append(f"{indent}  minflux_latch_{n}: ;")
                self.block(s.latch, indent + "    ", out)
                out.append(f"{indent}}}")
                out.append(f"{indent}minflux_end_{n}: ;")
                self.loop_stack.pop()
            elif isinstance(s, Break):
                out.append(f"{indent}goto minflux_end_{self.loop_stack[-1]};")
            elif isinstance(s, Continue):
                out.append(f"{indent}goto minflux_latch_{self.loop_stack[-1]};")
            elif isinstance(s, Return):
                for k, v in enumerate(s.values):
                    out.append(f"{indent}*out{k} = {self.atom(v)};")
                out.append(f"{indent}return;")
            else:  # pragma: no cover - a bug in a pass
                raise TypeError(f"not an IR statement: {s!r}")

    def assign(self, s: Assign, indent: str, out: list) -> None:
        target = self.name(s.target)
        value = s.value
        kind = self.fn.kinds[s.target]
        if isinstance(value, Call) and value.op in self.subroutine_names:
            args = ", ".join(self.atom(a) for a in value.args)
            c_sub, out_kind = self.subroutine_names[value.op]
            tmp = f"{target}_sub"
            out.append(f"{indent}{{ {self.ctype(out_kind)} {tmp}; {c_sub}({args}, &{tmp}); "
                       f"{target} = ({self.ctype(kind)}){tmp}; }}")
            return
        text = self.call(value, kind) if isinstance(value, Call) else self.atom(value)
        out.append(f"{indent}{target} = {text};")

    def function(self, c_name: str, param_kinds: list) -> str:
        fn = self.fn
        for p in fn.params:
            self.name(p)
        body: list = []
        self.block(fn.body, "    ", body)
        params = [f"{self.ctype(k)} in{i}" for i, k in enumerate(param_kinds)]
        params += [f"{self.ctype(k)} *out{i}" for i, k in enumerate(fn.output_kinds)]
        head = [f"static __device__ __forceinline__ void {c_name}({', '.join(params)}) {{"]
        decls = [f"    {self.ctype(fn.kinds[p])} {self.name(p)} = in{i};" for i, p in enumerate(fn.params)]
        params_set = set(fn.params)
        for ir_name in _assigned_in_order(fn.body):
            if ir_name not in params_set:
                decls.append(f"    {self.ctype(fn.kinds[ir_name])} {self.name(ir_name)} = 0;")
        return "\n".join(head + decls + body + ["}"])


def _assigned_in_order(stmts: list) -> list:
    from .ir import assigned_names
    return assigned_names(stmts)


@dataclass
class CKernel:
    """The CUDA C of one kernel: its device function, the subroutines it calls, and its signature."""

    name: str
    function: str
    subroutines: list = field(default_factory=list)
    input_kinds: list = field(default_factory=list)
    output_kinds: list = field(default_factory=list)
    float_type: str = "float32"

    @property
    def source(self) -> str:
        """Subroutines and the kernel function (the shared `HELPERS` come separately)."""
        return "\n\n".join(self.subroutines + [self.function]) + "\n"

    def input_types(self) -> list:
        return [c_type(k, self.float_type) for k in self.input_kinds]

    def output_types(self) -> list:
        return [c_type(k, self.float_type) for k in self.output_kinds]


def _typed_subroutines(fn: Function, float_type: str, fast_math: bool, prefix: str):
    """Print the primal bodies of the user rules ``fn`` calls; returns (sources, {op: (c name, kind)})."""
    from .kinds import infer_kinds

    names: dict = {}
    pending = dict(fn.subroutines)
    done: set = set()
    while pending:
        op, sub = pending.popitem()
        if op in done:
            continue
        done.add(op)
        pending.update({k: v for k, v in getattr(sub, "subroutines", {}).items() if k not in done})
        typed = sub if sub.kinds else infer_kinds(sub, ["f"] * len(sub.params))
        c_name = re.sub(r"\W", "_", f"{prefix}_sub_{op}")
        names[op] = (c_name, typed.output_kinds[0], typed, len(typed.output_kinds))
    for op, (c_name, kind, typed, n_out) in names.items():
        if n_out != 1:
            raise CompileError(f"the scalar rule {op!r} returns {n_out} values; a scalar rule returns one")
    call_names = {op: (c_name, kind) for op, (c_name, kind, _, _) in names.items()}
    protos, bodies = [], []
    for op, (c_name, kind, typed, _) in names.items():
        printer = _Printer(typed, float_type, fast_math, call_names, f"the scalar rule {op!r}")
        text = printer.function(c_name, ["f"] * len(typed.params))
        protos.append(text.split(" {", 1)[0] + ";")
        bodies.append(text)
    return (protos + bodies if bodies else []), call_names


def generate(fn: Function, float_type: str, *, name: str = "minflux_kernel", fast_math: bool = False,
             input_kinds: list | None = None) -> CKernel:
    """Print typed IR function ``fn`` as the CUDA C device function ``name`` (see the module doc).

    ``input_kinds`` are the kinds of the arrays passed in (default: the kinds of the parameters).
    """
    if float_type not in _FLOAT_TYPES:
        raise TypeError(f"the CUDA backend computes elementwise functions in float32 or float64, not "
                        f"{float_type}; convert the arrays first, e.g. x.astype(cupy.float32)")
    if not fn.kinds:
        raise ValueError("generate needs a typed function: run kinds.infer_kinds first")
    input_kinds = list(input_kinds) if input_kinds is not None else [fn.kinds[p] for p in fn.params]
    subs, call_names = _typed_subroutines(fn, float_type, fast_math, name)
    printer = _Printer(fn, float_type, fast_math, call_names, f"the scalar function {fn.name!r}")
    text = printer.function(name, input_kinds)
    return CKernel(name, text, subs, input_kinds, list(fn.output_kinds), float_type)
