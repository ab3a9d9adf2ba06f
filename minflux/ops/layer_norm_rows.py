"""Compiled row kernels for `layer_norm` on the CPU: the forward pass reads each row twice and writes it
once, the backward pass reads the gradient and the normalised row twice and writes once; numpy
spends about seven passes on the forward and eleven on the backward.

Reductions may be reassociated (so they vectorise); infinities and NaNs propagate as in numpy.
"""
from __future__ import annotations

import functools

import numpy as np

_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}


@functools.cache
def kernels():
    """The compiled ``(forward, backward)`` pair (compiled on first use, cached on disk by numba)."""
    import numba

    @numba.njit(cache=True, fastmath=_FASTMATH)
    def forward(x, scale, shift, eps, out, normalised, reciprocal):
        rows, columns = x.shape
        for r in range(rows):
            total = 0.0
            for c in range(columns):
                total += x[r, c]
            mean = total / columns
            squares = 0.0
            for c in range(columns):
                d = x[r, c] - mean
                squares += d * d
            inverse = 1.0 / np.sqrt(squares / columns + eps)
            reciprocal[r] = inverse
            for c in range(columns):
                n = (x[r, c] - mean) * inverse
                normalised[r, c] = n
                out[r, c] = n * scale[c] + shift[c]

    @numba.njit(cache=True, fastmath=_FASTMATH)
    def backward(g, normalised, reciprocal, scale, g_x, g_scale, g_shift):
        rows, columns = g.shape
        for r in range(rows):
            total = 0.0
            weighted = 0.0
            for c in range(columns):
                gn = g[r, c] * scale[c]
                total += gn
                weighted += gn * normalised[r, c]
                g_scale[c] += g[r, c] * normalised[r, c]
                g_shift[c] += g[r, c]
            mean_g = total / columns
            mean_gn = weighted / columns
            inverse = reciprocal[r]
            for c in range(columns):
                g_x[r, c] = inverse * (g[r, c] * scale[c] - mean_g - normalised[r, c] * mean_gn)

    return forward, backward


def usable(*arrays) -> bool:
    """True when every array is a numpy float32/float64 array of one dtype (the kernels' types)."""
    dtype = arrays[0].dtype
    return all(type(a) is np.ndarray and a.dtype == dtype and dtype in (np.float32, np.float64)
               for a in arrays)
