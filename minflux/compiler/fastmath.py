"""Vectorisable float32 transcendental functions for the generated CPU kernels.

Calls into libm (``expf``, ``tanhf``, ``logf``) are opaque to LLVM's loop vectoriser and made a
measured cell-update kernel 6-8x slower than the same loop with inlinable implementations. The
functions here use only float32 arithmetic, comparisons, selects and bit casts, so a kernel loop that
calls them vectorises to AVX2/AVX-512.

Accuracy, checked by ``tests/compiler/test_fastmath.py`` against float64 numpy on random bit
patterns, dense grids and special values, in units in the last place of the float32 result:
``exp_f32``, ``expm1_f32``, ``log_f32`` at most 2 ulp; ``log1p_f32``, ``tanh_f32``, ``sigmoid_f32``
at most 3 ulp; ``softplus_f32`` at most 4 ulp. Special values: ``exp`` overflows to ``inf`` above
88.72 and underflows through subnormals to 0; ``log`` of 0 is ``-inf``, of a negative number
``nan``; ``nan`` propagates everywhere.

>>> import numpy as np
>>> from minflux.compiler.fastmath import exp_f32
>>> float(exp_f32(np.float32(1.0)))
2.7182817459106445
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_F = np.float32


def _i32(context):
    return context.get_value_type(types.int32)


def _const(context, value):
    return _i32(context)(value)


@intrinsic
def _scale(typingctx, p, t):
    """``p * 2**n`` where ``t = n + 1.5 * 2**23`` holds the integer ``n`` in its low mantissa bits.

    The exponent arithmetic runs on 32-bit integers in registers; scaling in two halves keeps
    each factor's exponent in range for -252 <= n <= 254 (results overflow or underflow gracefully).
    """
    if p != types.float32 or t != types.float32:
        return None

    def codegen(context, builder, signature, args):
        f32 = context.get_value_type(types.float32)
        n = builder.sub(builder.bitcast(args[1], _i32(context)), _const(context, 0x4B400000))
        h = builder.ashr(n, _const(context, 1))
        bias = _const(context, 127)
        shift = _const(context, 23)
        a = builder.bitcast(builder.shl(builder.add(h, bias), shift), f32)
        b = builder.bitcast(builder.shl(builder.add(builder.sub(n, h), bias), shift), f32)
        return builder.fmul(builder.fmul(args[0], a), b)

    return types.float32(types.float32, types.float32), codegen


@intrinsic
def _mantissa(typingctx, x):
    """The significand of a positive normal float32 as a float in [1, 2)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        bits = builder.bitcast(args[0], _i32(context))
        m = builder.or_(builder.and_(bits, _const(context, 0x007FFFFF)), _const(context, 0x3F800000))
        return builder.bitcast(m, context.get_value_type(types.float32))

    return types.float32(types.float32), codegen


@intrinsic
def _exponent(typingctx, x):
    """The unbiased binary exponent of a positive normal float32, as a float32."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        bits = builder.bitcast(args[0], _i32(context))
        e = builder.and_(builder.lshr(bits, _const(context, 23)), _const(context, 255))
        e = builder.sub(e, _const(context, 127))
        return builder.sitofp(e, context.get_value_type(types.float32))

    return types.float32(types.float32), codegen


_LOG2E = _F(1.4426950408889634)
_LN2_HI = _F(0.693145751953125)        # ln 2 rounded to 16 significant bits: n * _LN2_HI is exact
_LN2_LO = _F(1.4286067653e-06)
_ROUND = _F(12582912.0)                 # 1.5 * 2**23: adding it rounds to an integer in the low bits
# inlined by LLVM into each kernel loop, where they vectorise (see `minflux.compiler.numba_runtime`)
_jit = njit(forceinline=True, nogil=True, error_model="numpy")


@_jit
def _reduce(x):
    """Split ``x = n ln2 + r`` with integer ``n`` and ``|r| <= ln2 / 2``.

    Returns ``(t, k, r)``: ``t`` holds ``n`` for `_scale`, ``k`` is ``n`` as a float.
    """
    t = x * _LOG2E + _ROUND
    k = t - _ROUND
    r = (x - k * _LN2_HI) - k * _LN2_LO
    return t, k, r


@_jit
def _expm1_poly(r):
    """exp(r) - 1 for |r| <= 0.35 (Taylor to degree 8; the truncation error is below 2**-30)."""
    p = _F(1.0 / 40320.0)
    p = p * r + _F(1.0 / 5040.0)
    p = p * r + _F(1.0 / 720.0)
    p = p * r + _F(1.0 / 120.0)
    p = p * r + _F(1.0 / 24.0)
    p = p * r + _F(1.0 / 6.0)
    p = p * r + _F(0.5)
    return r + (r * r) * p


@_jit
def exp_f32(x):
    """``e**x`` in float32 (at most 2 ulp from the correctly rounded result)."""
    x = _F(x)
    x = _F(-104.0) if x < _F(-104.0) else x
    x = _F(89.0) if x > _F(89.0) else x
    t, k, r = _reduce(x)
    return _scale(_expm1_poly(r) + _F(1.0), t)


@_jit
def expm1_f32(x):
    """``e**x - 1`` in float32, accurate near 0."""
    x = _F(x)
    x = _F(-104.0) if x < _F(-104.0) else x
    x = _F(89.0) if x > _F(89.0) else x
    t, k, r = _reduce(x)
    p = _expm1_poly(r)
    s = _scale(_F(1.0), t)
    medium = s * p + (s - _F(1.0))                  # no cancellation for n >= 1
    large = _scale(p + _F(1.0), t) - _F(1.0)        # s alone may overflow where exp(x) does not
    small = x if x == _F(0.0) else _expm1_poly(x)   # -0.0 stays -0.0
    y = large if k > _F(32.0) else medium
    return small if abs(x) < _F(0.3) else y


@_jit
def log_f32(x):
    """Natural logarithm in float32 (at most 2 ulp)."""
    x = _F(x)
    tiny = x < _F(1.17549435e-38)
    xs = x * _F(8388608.0) if tiny else x          # scale subnormals by 2**23
    e = _exponent(xs)
    m = _mantissa(xs)
    big = m > _F(1.41421356)
    m = m * _F(0.5) if big else m
    e = e + _F(1.0) if big else e
    e = e - _F(23.0) if tiny else e
    f = (m - _F(1.0)) / (m + _F(1.0))
    f2 = f * f
    p = _F(2.0 / 9.0)
    p = p * f2 + _F(2.0 / 7.0)
    p = p * f2 + _F(2.0 / 5.0)
    p = p * f2 + _F(2.0 / 3.0)
    lm = _F(2.0) * f + f * f2 * p
    y = e * _LN2_HI + (lm + e * _LN2_LO)
    y = _F(np.nan) if x < _F(0.0) else y
    y = -_F(np.inf) if x == _F(0.0) else y
    y = x if x == _F(np.inf) else y
    return y + x if x != x else y                   # propagate nan


@_jit
def log1p_f32(x):
    """``log(1 + x)`` in float32, accurate near 0."""
    x = _F(x)
    u = _F(1.0) + x
    d = u - _F(1.0)
    y = log_f32(u)
    corrected = y - (d - x) / u                     # first-order fix for the rounding of 1 + x
    corrected = x if d == _F(0.0) else corrected
    return y if (u == _F(np.inf)) | (u == _F(0.0)) else corrected


@_jit
def tanh_f32(x):
    """Hyperbolic tangent in float32 (at most 3 ulp)."""
    x = _F(x)
    a = abs(x)
    a = _F(9.5) if a > _F(9.5) else a               # tanh(9.5) rounds to 1 in float32
    t = expm1_f32(_F(2.0) * a)
    y = math.copysign(t / (t + _F(2.0)), x)         # odd, -0.0 included
    return y + x if x != x else y


@_jit
def sigmoid_f32(x):
    """Logistic ``1 / (1 + exp(-x))`` in float32 (at most 3 ulp)."""
    x = _F(x)
    e = exp_f32(-abs(x))
    return (_F(1.0) if x >= _F(0.0) else e) / (_F(1.0) + e)


@_jit
def softplus_f32(x):
    """``log(1 + exp(x))`` in float32, stable for large ``|x|``."""
    x = _F(x)
    m = x if x > _F(0.0) else _F(0.0)
    return m + log1p_f32(exp_f32(-abs(x)))
