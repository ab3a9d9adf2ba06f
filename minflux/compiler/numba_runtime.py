"""Small scalar helpers the generated numba kernels call (inlined), with numpy's semantics.

``_max``/``_min`` propagate nan like ``np.maximum``/``np.minimum`` and compile to compare + select;
the float64 helpers give numpy's results for invalid arguments (nan, -inf) instead of raising.

>>> float(_max(1.0, float("nan"))) != float(_max(1.0, float("nan")))
True
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

_jit = njit(inline="always", error_model="numpy")


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
