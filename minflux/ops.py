"""Structural ops with hand-written VJPs (reductions, shapes, indexing, matmul, losses).

Every op accepts arrays, Tensors and numbers; VJP closures capture arrays, never Tensors.
"""
from __future__ import annotations

import builtins

from .autograd import record
from .backend import get_array_module
from .broadcast.node import sum_to
from .tensor import Tensor


def _value(x):
    return x.value if isinstance(x, Tensor) else x


def _normalise_axis(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(a % ndim if ndim else a for a in axes)


def _expand_reduced(g, shape, axis, keepdims):
    """Reshape a reduction's output gradient so it broadcasts against the input shape."""
    if keepdims or g.ndim == len(shape):
        return g
    axes = _normalise_axis(axis, len(shape))
    kept = [1 if i in axes else n for i, n in enumerate(shape)]
    return g.reshape(kept)


def sum(x, axis=None, keepdims: bool = False):
    """Sum over ``axis`` (all axes by default).

    >>> import minflux as mf, numpy as np
    >>> mf.sum(np.ones((2, 3)), axis=0)
    array([2., 2., 2.])
    """
    v = _value(x)
    xp = get_array_module(v, op="mf.sum")
    out = xp.sum(v, axis=axis, keepdims=keepdims)
    shape = v.shape

    def vjp(g, needs):
        return [xp.broadcast_to(_expand_reduced(g, shape, axis, keepdims), shape)]

    return record("sum", out, [x], vjp)


def mean(x, axis=None, keepdims: bool = False):
    """Mean over ``axis`` (all axes by default).

    >>> import minflux as mf, numpy as np
    >>> mf.mean(np.array([1.0, 3.0]))
    np.float64(2.0)
    """
    v = _value(x)
    xp = get_array_module(v, op="mf.mean")
    out = xp.mean(v, axis=axis, keepdims=keepdims)
    shape = v.shape
    count = 1
    for a in _normalise_axis(axis, v.ndim):
        count *= shape[a]

    def vjp(g, needs):
        return [xp.broadcast_to(_expand_reduced(g, shape, axis, keepdims) / count, shape)]

    return record("mean", out, [x], vjp)


def reshape(x, shape):
    """``x`` with a new shape (one dimension may be -1).

    >>> import minflux as mf, numpy as np
    >>> mf.reshape(np.arange(6.0), (2, -1)).shape
    (2, 3)
    """
    v = _value(x)
    old = v.shape
    return record("reshape", v.reshape(shape), [x], lambda g, needs: [g.reshape(old)])


def transpose(x, axes=None):
    """Permute the axes (reverse them by default).

    >>> import minflux as mf, numpy as np
    >>> mf.transpose(np.zeros((2, 3))).shape
    (3, 2)
    """
    v = _value(x)
    xp = get_array_module(v, op="mf.transpose")
    out = xp.transpose(v, axes)
    inverse = None if axes is None else tuple(xp.argsort(xp.asarray(axes)).tolist())
    return record("transpose", out, [x], lambda g, needs: [xp.transpose(g, inverse)])


def matmul(a, b):
    """Matrix product with numpy's rules (batched over leading axes, vectors promoted).

    >>> import minflux as mf, numpy as np
    >>> mf.matmul(np.ones((2, 3)), np.ones((3, 4))).shape
    (2, 4)
    """
    av, bv = _value(a), _value(b)
    xp = get_array_module(av, bv, op="mf.matmul (@)")
    try:
        out = xp.matmul(av, bv)
    except ValueError as e:
        raise ValueError(f"mf.matmul: shapes {tuple(av.shape)} and {tuple(bv.shape)} are not aligned "
                         f"(the last axis of the first must equal the second-to-last of the second)") from e

    def vjp(g, needs):
        a2 = av[None, :] if av.ndim == 1 else av
        b2 = bv[:, None] if bv.ndim == 1 else bv
        g2 = g
        if av.ndim == 1:
            g2 = xp.expand_dims(g2, -2)
        if bv.ndim == 1:
            g2 = xp.expand_dims(g2, -1)
        ga = gb = None
        if needs[0]:
            ga = sum_to(xp.matmul(g2, xp.swapaxes(b2, -1, -2)), a2.shape).reshape(av.shape)
        if needs[1]:
            gb = sum_to(xp.matmul(xp.swapaxes(a2, -1, -2), g2), b2.shape).reshape(bv.shape)
        return [ga, gb]

    return record("matmul", out, [a, b], vjp)


def getitem(x, index):
    """``x[index]`` for basic slicing and integer-array indexing; the gradient scatter-adds.

    >>> import minflux as mf, numpy as np
    >>> mf.getitem(np.arange(4.0), slice(1, 3))
    array([1., 2.])
    """
    v = _value(x)
    xp = get_array_module(v, op="indexing")
    if isinstance(index, Tensor):
        index = index.value
    if isinstance(index, tuple):
        index = tuple(i.value if isinstance(i, Tensor) else i for i in index)
    out = v[index]
    shape, dtype = v.shape, v.dtype

    def vjp(g, needs):
        full = xp.zeros(shape, dtype=dtype)
        if _is_basic(index):
            full[index] = g
        else:
            xp.add.at(full, index, g) if xp.__name__ == "numpy" else xp.add.at(full, index, g)
        return [full]

    return record("getitem", out, [x], vjp)


def _is_basic(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return builtins.all(i is None or i is Ellipsis or isinstance(i, (int, slice)) for i in items)
