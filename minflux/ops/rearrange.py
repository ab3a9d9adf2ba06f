"""Rearranging elements: pad, tile, repeat, flip, roll, moveaxis and flatten.

Each VJP routes the output gradient back to the elements it came from: slices for ``pad`` with a
constant, sums over the copies for ``tile`` and ``repeat``, the inverse permutation otherwise.
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd import record
from ..backend import as_array, get_array_module, scatter_add
from ._common import normalise_axes, normalise_axis, value_of
from .shapes import reshape

_PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


def _pad_widths(pad_width, ndim: int) -> list[tuple[int, int]]:
    widths = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (ndim, 2))
    if (widths < 0).any():
        raise ValueError(f"mf.pad: pad widths must be non-negative, got {pad_width!r}")
    return [(int(a), int(b)) for a, b in widths]


def pad(x, pad_width, mode: str = "constant", constant_values=0):
    """Pad ``x`` as ``numpy.pad``: ``pad_width`` is ``((before, after),)`` per axis (or one pair or
    one int for all); ``mode`` is ``"constant"`` (with ``constant_values``), ``"edge"``,
    ``"reflect"``, ``"symmetric"`` or ``"wrap"``. Padding copied from ``x`` sends its gradient back.

    >>> import minflux as mf, numpy as np
    >>> mf.pad(np.array([1.0, 2.0]), (1, 2))
    array([0., 1., 2., 0., 0.])
    >>> mf.gradient(lambda x: mf.sum(mf.pad(x, 2, mode="edge")), np.zeros(3))[0]
    array([3., 1., 3.])
    """
    if mode not in _PAD_MODES:
        raise ValueError(f"mf.pad: mode must be one of {_PAD_MODES}, got {mode!r}")
    v = value_of(x)
    xp = get_array_module(v, op="mf.pad")
    v = as_array(xp, v)
    shape = tuple(v.shape)
    widths = _pad_widths(pad_width, v.ndim)
    if mode == "constant":
        out = xp.pad(v, widths, mode="constant", constant_values=constant_values)
        inner = tuple(slice(a, a + n) for (a, _), n in zip(widths, shape))
        return record("pad", out, [x], lambda g, needs: [g[inner]])
    out = xp.pad(v, widths, mode=mode)
    size = v.size
    source = xp.pad(xp.arange(size).reshape(shape), widths, mode=mode)  # where each element came from

    def vjp(g, needs):
        flat = xp.zeros(size, dtype=g.dtype)
        scatter_add(flat, source.reshape(-1), g.reshape(-1))
        return [flat.reshape(shape)]

    return record("pad", out, [x], vjp)


def tile(x, reps):
    """``x`` repeated ``reps`` times along each axis, as ``numpy.tile``; the gradient sums the copies.

    >>> import minflux as mf, numpy as np
    >>> mf.tile(np.array([1.0, 2.0]), (2, 2))
    array([[1., 2., 1., 2.],
           [1., 2., 1., 2.]])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.tile")
    v = as_array(xp, v)
    reps = (reps,) if isinstance(reps, (int, np.integer)) else tuple(reps)
    shape = tuple(v.shape)
    ndim = max(len(shape), len(reps))
    full_shape = (1,) * (ndim - len(shape)) + shape
    full_reps = (1,) * (ndim - len(reps)) + reps
    out = xp.tile(v, reps)

    def vjp(g, needs):
        split = [n for pair in zip(full_reps, full_shape) for n in pair]
        summed = xp.sum(g.reshape(split), axis=tuple(range(0, 2 * ndim, 2)))
        return [summed.reshape(shape)]

    return record("tile", out, [x], vjp)


def repeat(x, repeats, axis: int | None = None):
    """Repeat each element ``repeats`` times (an int, or one count per element along ``axis``), as
    ``numpy.repeat``; ``axis=None`` works on the flattened array.

    >>> import minflux as mf, numpy as np
    >>> mf.repeat(np.array([1.0, 2.0]), [1, 3])
    array([1., 2., 2., 2.])
    >>> mf.gradient(lambda x: mf.sum(mf.repeat(x, [1, 3])), np.zeros(2))[0]
    array([1., 3.])
    """
    if axis is None:
        return repeat(reshape(x, (-1,)), repeats, axis=0)
    v = value_of(x)
    xp = get_array_module(v, op="mf.repeat")
    v = as_array(xp, v)
    shape = tuple(v.shape)
    axis = normalise_axis(axis, v.ndim, "mf.repeat", shape)
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iu" or (counts < 0).any():
        raise ValueError(f"mf.repeat: repeats must be non-negative integers, got {repeats!r}")
    if counts.ndim == 1 and counts.size != shape[axis]:
        raise ValueError(f"mf.repeat: {counts.size} repeat counts for axis {axis} of length "
                         f"{shape[axis]}")
    out = xp.repeat(v, as_array(xp, counts) if counts.ndim else int(counts), axis=axis)

    def vjp(g, needs):
        if counts.ndim == 0:
            split = shape[:axis] + (shape[axis], int(counts)) + shape[axis + 1:]
            return [xp.sum(g.reshape(split), axis=axis + 1)]
        rows = as_array(xp, np.repeat(np.arange(shape[axis]), counts))
        moved = xp.moveaxis(g, axis, 0)
        buffer = xp.zeros((shape[axis],) + moved.shape[1:], dtype=g.dtype)
        scatter_add(buffer, rows, moved)
        return [xp.moveaxis(buffer, 0, axis)]

    return record("repeat", out, [x], vjp)


def flip(x, axis=None):
    """Reverse the order of elements along ``axis`` (an int, a tuple, or None for all axes).

    >>> import minflux as mf, numpy as np
    >>> mf.flip(np.array([[1.0, 2.0], [3.0, 4.0]]), axis=1)
    array([[2., 1.],
           [4., 3.]])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.flip")
    v = as_array(xp, v)
    axes = normalise_axes(axis, v.ndim, "mf.flip", tuple(v.shape))
    return record("flip", xp.flip(v, axes), [x], lambda g, needs: [xp.flip(g, axes)])


def roll(x, shift, axis=None):
    """Shift elements cyclically by ``shift`` along ``axis`` (the flattened array when None), as
    ``numpy.roll``; ``shift`` and ``axis`` may be tuples of equal length.

    >>> import minflux as mf, numpy as np
    >>> mf.roll(np.array([1.0, 2.0, 3.0]), 1)
    array([3., 1., 2.])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.roll")
    v = as_array(xp, v)
    if axis is not None:
        for a in (axis if isinstance(axis, (tuple, list)) else (axis,)):
            normalise_axis(a, v.ndim, "mf.roll", tuple(v.shape))
    back = tuple(-s for s in shift) if isinstance(shift, (tuple, list)) else -shift
    out = xp.roll(v, shift, axis=axis)
    return record("roll", out, [x], lambda g, needs: [xp.roll(g, back, axis=axis)])


def moveaxis(x, source, destination):
    """Move axes of ``x`` from ``source`` to ``destination`` (ints or sequences), keeping the order
    of the others.

    >>> import minflux as mf, numpy as np
    >>> mf.moveaxis(np.zeros((2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.moveaxis")
    v = as_array(xp, v)
    src = source if isinstance(source, (tuple, list)) else (source,)
    dst = destination if isinstance(destination, (tuple, list)) else (destination,)
    if len(src) != len(dst):
        raise ValueError(f"mf.moveaxis: {len(src)} source axes but {len(dst)} destinations")
    shape = tuple(v.shape)
    src = [normalise_axis(a, v.ndim, "mf.moveaxis", shape) for a in src]
    dst = [normalise_axis(a, v.ndim, "mf.moveaxis", shape) for a in dst]
    out = xp.moveaxis(v, src, dst)
    return record("moveaxis", out, [x], lambda g, needs: [xp.moveaxis(g, dst, src)])


def flatten(x, start_axis: int = 0, end_axis: int = -1):
    """Merge axes ``start_axis`` to ``end_axis`` (inclusive) into one; all of them by default.

    >>> import minflux as mf, numpy as np
    >>> mf.flatten(np.zeros((2, 3, 4))).shape
    (24,)
    >>> mf.flatten(np.zeros((2, 3, 4)), start_axis=1).shape
    (2, 12)
    """
    shape = tuple(np.shape(value_of(x)))
    if not shape:
        return reshape(x, (1,))
    start = normalise_axis(start_axis, len(shape), "mf.flatten", shape)
    end = normalise_axis(end_axis, len(shape), "mf.flatten", shape)
    if start > end:
        raise ValueError(f"mf.flatten: start_axis {start_axis} comes after end_axis {end_axis} for "
                         f"shape {shape}")
    return reshape(x, shape[:start] + (math.prod(shape[start:end + 1]),) + shape[end + 1:])
