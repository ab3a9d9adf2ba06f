"""Small scalar helpers the generated numba kernels call, with numpy's semantics.

The helpers are compiled once per process and inlined by LLVM into each kernel (``forceinline``);
numba's own inlining (``inline="always"``) re-typed and re-lowered a copy of each helper at every
call site. ``_select(c, a, b)`` is an intrinsic that emits one LLVM ``select``: a ternary in a
kernel's source is two numba blocks, and with hundreds of selects numba's SSA passes took seconds.

``_max``/``_min`` propagate nan like ``np.maximum``/``np.minimum`` and compile to compare + select;
the float64 helpers give numpy's results for invalid arguments (nan, -inf) instead of raising.

>>> float(_max(1.0, float("nan"))) != float(_max(1.0, float("nan")))
True
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

_jit = njit(forceinline=True, error_model="numpy")


@intrinsic
def _select(typingctx, c, a, b):
    """``a if c else b`` without a branch (an LLVM ``select``)."""
    kind = typingctx.unify_types(a, b)
    if kind is None:
        return None

    def codegen(context, builder, signature, args):
        cv, av, bv = args
        cond = context.cast(builder, cv, c, types.boolean)
        return builder.select(cond, context.cast(builder, av, a, kind), context.cast(builder, bv, b, kind))

    return kind(c, a, b), codegen


@_jit
def _max(a, b):
    return a if (a >= b or a != a) else b


@_jit
def _min(a, b):
    return a if (a <= b or a != a) else b


@_jit
def _log64(x):
    return np.log(x)


@_jit
def _log1p64(x):
    return np.log1p(x)


@_jit
def _sigmoid64(x):
    e = math.exp(-abs(x))
    return (1.0 if x >= 0 else e) / (1.0 + e)


@_jit
def _softplus64(x):
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))
