"""Statistics over axes: var, std, prod, cumsum, and argmax/argmin (which have no gradient).

``std`` and ``prod`` have hand-written VJPs that stay finite where a composed version would not: the
gradient of ``std`` at zero spread is 0 (not ``0/0``), and ``prod`` differentiates through zeros by
multiplying the products of the elements before and after each one.
"""
from __future__ import annotations

import math

from ..autograd import record
from ..backend import as_array, get_array_module
from ._common import constant_result, keepdims_shape, normalise_axes, normalise_axis, value_of


def _setup(x, axis, op):
    v = value_of(x)
    xp = get_array_module(v, op=op)
    v = as_array(xp, v)
    shape = tuple(v.shape)
    return v, xp, shape, normalise_axes(axis, len(shape), op, shape)


def _count(shape, axes, ddof, op) -> float:
    n = math.prod(shape[a] for a in axes)
    if n - ddof <= 0:
        raise ValueError(f"{op}: {n} elements along the reduced axes leave no degrees of freedom "
                         f"with ddof={ddof}")
    return n - ddof


def var(x, axis=None, ddof: int = 0, keepdims: bool = False):
    """Variance over ``axis``: ``sum((x - mean)^2) / (n - ddof)`` (``ddof=1`` for the sample variance).

    >>> import minflux as mf, numpy as np
    >>> float(mf.var(np.array([1.0, 2.0, 3.0, 4.0])))
    1.25
    >>> float(mf.var(np.array([1.0, 2.0, 3.0, 4.0]), ddof=1))
    1.6666666666666667
    """
    v, xp, shape, axes = _setup(x, axis, "mf.var")
    dof = _count(shape, axes, ddof, "mf.var")
    centred = v - xp.mean(v, axis=axes, keepdims=True)
    out = xp.sum(centred * centred, axis=axes, keepdims=keepdims) / dof
    kept = keepdims_shape(shape, axes)

    def vjp(g, needs):
        return [g.reshape(kept) * (2.0 / dof) * centred]

    return record("var", out.astype(v.dtype, copy=False), [x], vjp)


def std(x, axis=None, ddof: int = 0, keepdims: bool = False):
    """Standard deviation over ``axis``: ``sqrt(var(x, axis, ddof))``; its gradient at zero spread is 0.

    >>> import minflux as mf, numpy as np
    >>> float(mf.std(np.array([1.0, 3.0])))
    1.0
    >>> mf.gradient(lambda x: mf.std(x), np.array([2.0, 2.0]))[0]
    array([0., 0.])
    """
    v, xp, shape, axes = _setup(x, axis, "mf.std")
    dof = _count(shape, axes, ddof, "mf.std")
    centred = v - xp.mean(v, axis=axes, keepdims=True)
    spread = xp.sqrt(xp.sum(centred * centred, axis=axes, keepdims=True) / dof).astype(v.dtype, copy=False)
    out = spread if keepdims else spread.reshape(tuple(n for i, n in enumerate(shape) if i not in axes))

    def vjp(g, needs):
        safe = xp.where(spread > 0, spread, 1)
        scale = xp.where(spread > 0, g.reshape(spread.shape) / (dof * safe), 0)
        return [scale * centred]

    return record("std", out, [x], vjp)


def _exclusive_products(xp, flat):
    """For each position along the last axis, the product of all other elements there."""
    ones = xp.ones(flat.shape[:-1] + (1,), dtype=flat.dtype)
    before = xp.cumprod(xp.concatenate([ones, flat[..., :-1]], axis=-1), axis=-1)
    after = xp.flip(xp.cumprod(xp.concatenate([ones, xp.flip(flat, -1)[..., :-1]], axis=-1), axis=-1), -1)
    return before * after


def prod(x, axis=None, keepdims: bool = False):
    """Product over ``axis``; the gradient is exact also where elements are zero.

    >>> import minflux as mf, numpy as np
    >>> float(mf.prod(np.array([2.0, 3.0, 4.0])))
    24.0
    >>> mf.gradient(lambda x: mf.prod(x), np.array([0.0, 3.0, 4.0]))[0]
    array([12.,  0.,  0.])
    """
    v, xp, shape, axes = _setup(x, axis, "mf.prod")
    out = xp.prod(v, axis=axes, keepdims=keepdims)
    kept = keepdims_shape(shape, axes)

    def vjp(g, needs):
        rest = tuple(i for i in range(len(shape)) if i not in axes)
        perm = rest + axes
        moved = xp.transpose(v, perm)
        flat = moved.reshape(moved.shape[:len(rest)] + (-1,))
        others = _exclusive_products(xp, flat).reshape(moved.shape)
        inverse = tuple(perm.index(i) for i in range(len(shape)))
        return [xp.transpose(others, inverse) * g.reshape(kept)]

    return record("prod", out, [x], vjp)


def cumsum(x, axis: int | None = None):
    """Cumulative sum along ``axis`` (of the flattened array when None).

    >>> import minflux as mf, numpy as np
    >>> mf.cumsum(np.array([[1.0, 2.0], [3.0, 4.0]]), axis=1)
    array([[1., 3.],
           [3., 7.]])
    >>> mf.gradient(lambda x: mf.sum(mf.cumsum(x)), np.zeros(3))[0]
    array([3., 2., 1.])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.cumsum")
    v = as_array(xp, v)
    shape = tuple(v.shape)
    if axis is None:
        out = xp.cumsum(v.reshape(-1))
        return record("cumsum", out, [x],
                      lambda g, needs: [xp.flip(xp.cumsum(xp.flip(g, 0)), 0).reshape(shape)])
    axis = normalise_axis(axis, v.ndim, "mf.cumsum", shape)
    out = xp.cumsum(v, axis=axis)
    return record("cumsum", out, [x],
                  lambda g, needs: [xp.flip(xp.cumsum(xp.flip(g, axis), axis=axis), axis)])


def _arg_extreme(x, axis, keepdims, name):
    v = value_of(x)
    xp = get_array_module(v, op=f"mf.{name}")
    v = as_array(xp, v)
    if v.size == 0:
        raise ValueError(f"mf.{name}: an empty array of shape {tuple(v.shape)} has no {name[3:]}imum")
    if axis is not None:
        axis = normalise_axis(axis, v.ndim, f"mf.{name}", tuple(v.shape))
    out = getattr(xp, name)(v, axis=axis)
    if keepdims:
        axes = normalise_axes(axis, v.ndim, name, tuple(v.shape))
        out = as_array(xp, out).reshape(keepdims_shape(tuple(v.shape), axes))
    return constant_result(out, [x])


def argmax(x, axis: int | None = None, keepdims: bool = False):
    """The index of the first largest element along ``axis`` (of the flattened array when None).

    Integer-valued: no gradient flows through it.

    >>> import minflux as mf, numpy as np
    >>> mf.argmax(np.array([[1.0, 5.0, 5.0], [7.0, 2.0, 0.0]]), axis=1)
    array([1, 0])
    """
    return _arg_extreme(x, axis, keepdims, "argmax")


def argmin(x, axis: int | None = None, keepdims: bool = False):
    """The index of the first smallest element along ``axis`` (of the flattened array when None).

    >>> import minflux as mf, numpy as np
    >>> int(mf.argmin(np.array([3.0, 1.0, 1.0])))
    1
    """
    return _arg_extreme(x, axis, keepdims, "argmin")
