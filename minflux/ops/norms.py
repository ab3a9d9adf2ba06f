"""Vector and matrix norms with ``numpy.linalg.norm``'s ``ord`` and ``axis``.

Vector 2- and p-norms have a hand-written VJP whose value at the zero vector is 0 (a subgradient)
instead of ``0/0``. The max/min and 1-norms are compositions of ``abs``, ``sum`` and ``max``/``min``,
whose gradients go to the first extreme element. The spectral norms (``ord=2``, ``-2``) and the
nuclear norm differentiate through the SVD: ``u v^T`` of the extreme singular pair, ``U V^T`` for the
nuclear norm; where singular values repeat these are subgradients.
"""
from __future__ import annotations

import math

from ..autograd import record
from ..backend import as_array, get_array_module
from ..pointwise.primitives import abs as absolute
from ._common import constant_result, keepdims_shape, normalise_axes, value_of
from .reductions import max as reduce_max, min as reduce_min, sum as reduce_sum
from .shapes import squeeze


def _vector_norm(x, v, xp, axes, ord, keepdims):
    if ord in (math.inf, -math.inf):
        extreme = reduce_max if ord > 0 else reduce_min
        return extreme(absolute(x), axis=axes, keepdims=keepdims)
    if ord == 0:
        return constant_result(xp.sum(v != 0, axis=axes, keepdims=keepdims).astype(v.dtype), [x])
    if ord == 1:
        return reduce_sum(absolute(x), axis=axes, keepdims=keepdims)
    p = float(ord)
    magnitude = xp.abs(v)
    if p == 2:
        total = xp.sqrt(xp.sum(v * v, axis=axes, keepdims=True))
    else:
        total = xp.sum(magnitude ** p, axis=axes, keepdims=True) ** (1.0 / p)
    total = total.astype(v.dtype, copy=False)
    shape = tuple(v.shape)
    out = total if keepdims else total.reshape(tuple(n for i, n in enumerate(shape) if i not in axes))

    def vjp(g, needs):
        g = g.reshape(total.shape)
        positive = total > 0
        safe = xp.where(positive, total, 1)
        if p == 2:
            return [xp.where(positive, g / safe, 0) * v]
        with_power = xp.sign(v) * magnitude ** (p - 1)
        return [xp.where(positive, g / safe ** (p - 1), 0) * with_power]

    return record("norm", out, [x], vjp)


def _singular_values(x, v, xp, axes, ord, keepdims):
    """Spectral (``ord=±2``) and nuclear norms over the two ``axes``, batched over the others."""
    shape = tuple(v.shape)
    rest = tuple(i for i in range(len(shape)) if i not in axes)
    perm = rest + axes
    moved = xp.transpose(v, perm)
    u, s, vt = xp.linalg.svd(moved, full_matrices=False)
    if ord == "nuc":
        total = xp.sum(s, axis=-1)
    else:
        pick = 0 if ord == 2 else s.shape[-1] - 1  # singular values come sorted, largest first
        total = s[..., pick]
    dtype = v.dtype  # the closure must not hold v
    total = total.astype(dtype, copy=False)
    kept = keepdims_shape(shape, axes)
    out = total.reshape(kept) if keepdims else total

    def vjp(g, needs):
        g = g.reshape(total.shape)[..., None, None]
        if ord == "nuc":
            direction = xp.matmul(u, vt)
        else:
            direction = u[..., :, pick, None] * vt[..., None, pick, :]
        inverse = tuple(perm.index(i) for i in range(len(shape)))
        return [xp.transpose((g * direction).astype(dtype, copy=False), inverse)]

    return record("norm", out, [x], vjp)


def _matrix_norm(x, v, xp, axes, ord, keepdims):
    row, col = axes
    if ord in (None, "fro"):
        return _vector_norm(x, v, xp, axes, 2, keepdims)
    if ord in (2, -2, "nuc"):
        return _singular_values(x, v, xp, axes, ord, keepdims)
    if ord in (1, -1, math.inf, -math.inf):
        summed_axis, extreme_axis = (row, col) if ord in (1, -1) else (col, row)
        extreme = reduce_max if ord > 0 else reduce_min
        sums = reduce_sum(absolute(x), axis=summed_axis, keepdims=True)
        result = extreme(sums, axis=extreme_axis, keepdims=True)
        return result if keepdims else squeeze(result, axis=axes)
    raise ValueError(f"mf.norm: ord={ord!r} is not a matrix norm; use None or 'fro', 'nuc', 1, -1, 2, -2, "
                     "inf or -inf")


def norm(x, ord=None, axis=None, keepdims: bool = False):
    """Vector or matrix norm, as ``numpy.linalg.norm``.

    With ``axis`` an int (or None on a 1-D array) it is a vector norm: ``ord`` None or 2 (Euclidean),
    any real p (``sum(|x|^p)^(1/p)``), ``inf``/``-inf`` (largest / smallest ``|x|``) or 0 (the count of
    nonzeros, no gradient). With ``axis`` a pair (or None on a 2-D array) it is a matrix norm: None or
    ``'fro'`` (Frobenius), ``'nuc'`` (sum of singular values), 2 / -2 (largest / smallest singular
    value), 1 / -1 (largest / smallest column sum of ``|x|``), ``inf`` / ``-inf`` (row sums). With
    ``axis=None`` and ``ord=None`` any array gives the 2-norm of all its elements.

    >>> import minflux as mf, numpy as np
    >>> float(mf.norm(np.array([3.0, 4.0])))
    5.0
    >>> mf.norm(np.array([[1.0, -2.0], [3.0, 4.0]]), ord=1)
    array(6.)
    >>> mf.gradient(lambda x: mf.norm(x), np.zeros(2))[0]
    array([0., 0.])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.norm")
    v = as_array(xp, v)
    shape = tuple(v.shape)
    if v.dtype.kind not in "fc":
        v = v.astype(float)
        x = v
    if axis is None:
        if ord is None:
            return _vector_norm(x, v, xp, tuple(range(v.ndim)), 2, keepdims)
        if v.ndim not in (1, 2):
            raise ValueError(f"mf.norm: ord={ord!r} needs a 1-D or 2-D array or an explicit axis, got "
                             f"shape {shape}")
        axis = tuple(range(v.ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(axes) == 1:
        axes = normalise_axes(axes, v.ndim, "mf.norm", shape)
        if isinstance(ord, str):
            raise ValueError(f"mf.norm: ord={ord!r} is a matrix norm; give a pair of axes")
        return _vector_norm(x, v, xp, axes, 2 if ord is None else ord, keepdims)
    if len(axes) == 2:
        ordered = tuple(a % v.ndim for a in axes) if v.ndim else ()
        normalise_axes(axes, v.ndim, "mf.norm", shape)
        return _matrix_norm(x, v, xp, ordered, ord, keepdims)
    raise ValueError(f"mf.norm: axis must be an int or a pair of ints, got {axis!r}")
