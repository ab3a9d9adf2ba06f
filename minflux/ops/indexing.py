"""Indexing: ``x[index]`` and ``take`` (the embedding gather), whose VJPs return an `IndexedGrad` so
that many lookups into one array accumulate into one gradient buffer (repeated indices scatter-add),
and ``index_set``, the functional assignment."""
from __future__ import annotations

import numpy as np

from ..autograd import IndexedGrad, record
from ..backend import as_array, get_array_module, is_array
from ..broadcasting import sum_to
from ..schedule import operation
from ..tensor import Tensor
from ._common import normalise_axis, value_of
from .shapes import reshape


def _plain_index(item, xp):
    if isinstance(item, Tensor):
        return item.value
    if isinstance(item, list):
        return as_array(xp, item)
    return item


def _selects_once(index) -> bool:
    """True when ``index`` cannot select one element twice: no integer arrays, or a single increasing
    non-negative one on the CPU (such as ``np.flatnonzero(mask)``)."""
    if type(index) is np.ndarray and index.dtype.kind in "iu" and index.ndim == 1:
        return index.size == 0 or bool(index[0] >= 0 and np.all(index[1:] > index[:-1]))
    items = index if isinstance(index, tuple) else (index,)
    for item in items:
        if is_array(item) and item.dtype.kind != "b":
            return False
    return True


@operation(results="new")
def _check_distinct_positions(index, rows: int) -> None:
    """Raise unless the 1-D integer ``index`` names each of ``rows`` rows at most once, counting ``-1``
    and ``rows - 1`` as the same row (out-of-range entries are left for the assignment to report); an
    operation, so a recording checks every replay's index."""
    xp = get_array_module(index)
    positions = xp.where(index < 0, index + rows, index)
    if int(xp.unique(positions).size) != int(index.size):
        raise ValueError(_REPEATED_POSITIONS)


_REPEATED_POSITIONS = ("mf.index_set: an integer index must be one 1-D array without repeated positions (a "
                       "negative index and its positive alias are one position); for repeated positions "
                       "that add up, use mf.take's gradient or build the sum explicitly")


def getitem(x, index):
    """``x[index]`` for basic slicing, boolean masks and integer arrays; repeated indices add up.

    >>> import minflux as mf, numpy as np
    >>> mf.getitem(np.arange(4.0), slice(1, 3))
    array([1., 2.])
    >>> mf.gradient(lambda x: mf.sum(x[np.array([0, 0, 2])]), np.zeros(3))[0]
    array([2., 0., 1.])
    """
    v = value_of(x)
    xp = get_array_module(v, op="indexing")
    if isinstance(index, tuple):
        index = tuple(_plain_index(i, xp) for i in index)
    else:
        index = _plain_index(index, xp)
    try:
        out = v[index]
    except IndexError as e:
        raise IndexError(f"indexing an array of shape {tuple(v.shape)}: {e}") from e
    shape, dtype, unique = tuple(v.shape), v.dtype, _selects_once(index)
    return record("getitem", out, [x], lambda g, needs: [IndexedGrad(shape, dtype, index, g, unique)])


def take(x, indices, axis: int | None = None):
    """Elements (``axis=None``, of the flattened array) or slices along ``axis`` picked by integer
    ``indices`` of any shape; with ``axis=0`` this is an embedding lookup. The gradient scatter-adds,
    so a row picked twice gets both contributions.

    >>> import minflux as mf, numpy as np
    >>> table = np.arange(6.0).reshape(3, 2)
    >>> mf.take(table, np.array([[2, 0]]), axis=0).shape
    (1, 2, 2)
    >>> mf.gradient(lambda t: mf.sum(mf.take(t, np.array([2, 2]), axis=0)), table)[0]
    array([[0., 0.],
           [0., 0.],
           [2., 2.]])
    """
    v = value_of(x)
    xp = get_array_module(v, indices, op="mf.take")
    idx = as_array(xp, value_of(indices))
    if idx.dtype.kind not in "iu":
        raise TypeError(f"mf.take: indices must be integers, got dtype {idx.dtype}")
    if axis is None:
        return take(reshape(x, (-1,)), idx, axis=0)
    shape = tuple(v.shape)
    axis = normalise_axis(axis, v.ndim, "mf.take", shape)
    try:
        out = xp.take(v, idx, axis=axis)
    except IndexError as e:
        raise IndexError(f"mf.take: {e} (array of shape {shape})") from e
    index = idx if axis == 0 else (slice(None),) * axis + (idx,)
    dtype = v.dtype
    return record("take", out, [x], lambda g, needs: [IndexedGrad(shape, dtype, index, g, False)])


def take_along_axis(x, indices, axis: int | None):
    """Pick one element per position along ``axis`` with integer ``indices`` of ``x``'s rank, as
    ``numpy.take_along_axis`` (``axis=None`` works on the flattened array). Picks of one element
    several times add up in the gradient.

    >>> import minflux as mf, numpy as np
    >>> x = np.array([[10.0, 30.0, 20.0], [60.0, 40.0, 50.0]])
    >>> mf.take_along_axis(x, np.array([[1], [0]]), axis=1)
    array([[30.],
           [60.]])
    >>> mf.gradient(lambda x: mf.sum(mf.take_along_axis(x, np.array([[1, 1]]), axis=1)), x)[0]
    array([[0., 2., 0.],
           [0., 2., 0.]])
    """
    v = value_of(x)
    xp = get_array_module(v, indices, op="mf.take_along_axis")
    idx = as_array(xp, value_of(indices))
    if idx.dtype.kind not in "iu":
        raise TypeError(f"mf.take_along_axis: indices must be integers, got dtype {idx.dtype}")
    if axis is None:
        return take_along_axis(reshape(x, (-1,)), idx.reshape(-1), axis=0)
    shape = tuple(v.shape)
    if idx.ndim != len(shape):
        raise ValueError(f"mf.take_along_axis: indices of shape {tuple(idx.shape)} need the rank of the "
                         f"array, {len(shape)} (shape {shape}); add axes with mf.expand_dims or [..., None]")
    axis = normalise_axis(axis, v.ndim, "mf.take_along_axis", shape)
    try:
        out = xp.take_along_axis(v, idx, axis=axis)
    except (IndexError, ValueError) as e:
        raise type(e)(f"mf.take_along_axis: {e} (array of shape {shape}, indices of shape "
                      f"{tuple(idx.shape)})") from e
    out_shape = tuple(out.shape)
    index = tuple(
        xp.broadcast_to(idx, out_shape) if d == axis else
        xp.arange(n).reshape((1,) * d + (n,) + (1,) * (len(shape) - d - 1))
        for d, n in enumerate(shape))
    index = tuple(xp.broadcast_to(i, out_shape) for i in index)
    dtype = v.dtype
    return record("take_along_axis", out, [x],
                  lambda g, needs: [IndexedGrad(shape, dtype, index, g, False)])


def index_set(x, index, values):
    """A copy of ``x`` with ``x[index] = values`` (JAX's ``x.at[index].set(values)``): ``x`` gets the
    gradient outside ``index``, ``values`` the gradient inside it. ``index`` is a basic index, a
    boolean mask or one integer array without repeats (a repeated position would make the result
    depend on the order of the writes).

    >>> import minflux as mf, numpy as np
    >>> mf.index_set(np.zeros((3, 2)), np.array([2, 0]), np.array([[1.0, 1.0], [2.0, 2.0]]))
    array([[2., 2.],
           [0., 0.],
           [1., 1.]])
    >>> mf.gradient(lambda v: mf.sum(mf.index_set(np.zeros(3), 1, v) * np.arange(3.0)), np.array(5.0))
    (array(1.),)
    """
    v, values_v = value_of(x), value_of(values)
    xp = get_array_module(v, values_v, op="mf.index_set")
    index = _plain_index(index, xp)
    if not _selects_once(index):
        if isinstance(index, tuple) or index.ndim != 1:
            raise ValueError(_REPEATED_POSITIONS)
        _check_distinct_positions(index, v.shape[0] if v.ndim else 0)
    out = v.astype(xp.result_type(v, values_v), copy=True)
    try:
        out[index] = values_v
    except (IndexError, ValueError) as e:
        raise type(e)(f"mf.index_set: {e} (array of shape {tuple(v.shape)}, values of shape "
                      f"{tuple(xp.shape(values_v))})") from e
    values_shape = tuple(xp.shape(values_v))

    def vjp(g, needs):
        g_x = g_values = None
        if needs[0]:
            g_x = g.copy()
            g_x[index] = 0
        if needs[1]:
            g_values = sum_to(g[index], values_shape)
        return [g_x, g_values]

    return record("index_set", out, [x, values], vjp)
