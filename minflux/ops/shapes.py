"""Shape ops: reshape, transpose, swapaxes, expand_dims, squeeze, broadcast_to, and joining and
splitting arrays (concatenate, stack, split, unstack). Their VJPs move gradients, never compute."""
from __future__ import annotations

import operator
from typing import Sequence

from ..autograd import record
from ..backend import get_array_module
from ..broadcasting import sum_to
from ._common import normalise_axes, normalise_axis, value_of


def reshape(x, shape):
    """``x`` with a new shape (one dimension may be -1).

    >>> import minflux as mf, numpy as np
    >>> mf.reshape(np.arange(6.0), (2, -1)).shape
    (2, 3)
    """
    v = value_of(x)
    old = tuple(v.shape)
    try:
        out = v.reshape(shape)
    except (ValueError, TypeError) as e:
        raise ValueError(f"mf.reshape: cannot reshape an array of shape {old} ({v.size} elements) "
                         f"into shape {shape}") from e
    return record("reshape", out, [x], lambda g, needs: [g.reshape(old)])


def transpose(x, axes=None):
    """Permute the axes (reverse them by default).

    >>> import minflux as mf, numpy as np
    >>> mf.transpose(np.zeros((2, 3, 4)), (1, 0, 2)).shape
    (3, 2, 4)
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.transpose")
    ndim = v.ndim
    if axes is not None:
        axes = tuple(axes)
        if sorted(a % ndim if ndim else a for a in axes) != list(range(ndim)):
            raise ValueError(f"mf.transpose: axes {axes} are not a permutation of the axes of an "
                             f"array of shape {tuple(v.shape)}")
        axes = tuple(a % ndim for a in axes)
    out = xp.transpose(v, axes)
    inverse = None if axes is None else tuple(axes.index(i) for i in range(ndim))
    return record("transpose", out, [x], lambda g, needs: [xp.transpose(g, inverse)])


def swapaxes(x, axis1: int, axis2: int):
    """``x`` with two axes interchanged.

    >>> import minflux as mf, numpy as np
    >>> mf.swapaxes(np.zeros((2, 3, 4)), 0, 2).shape
    (4, 3, 2)
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.swapaxes")
    shape = tuple(v.shape)
    a1 = normalise_axis(axis1, v.ndim, "mf.swapaxes", shape)
    a2 = normalise_axis(axis2, v.ndim, "mf.swapaxes", shape)
    return record("swapaxes", xp.swapaxes(v, a1, a2), [x], lambda g, needs: [xp.swapaxes(g, a1, a2)])


def expand_dims(x, axis):
    """``x`` with a new axis of length 1 inserted at ``axis`` (an int or a tuple).

    >>> import minflux as mf, numpy as np
    >>> mf.expand_dims(np.zeros((2, 3)), -1).shape
    (2, 3, 1)
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.expand_dims")
    shape = tuple(v.shape)
    n_new = len(axis) if isinstance(axis, (tuple, list)) else 1
    normalise_axes(axis, len(shape) + n_new, "mf.expand_dims", shape)
    out = xp.expand_dims(v, axis)
    return record("expand_dims", out, [x], lambda g, needs: [g.reshape(shape)])


def squeeze(x, axis=None):
    """``x`` without axes of length 1 (only ``axis`` when given, which must have length 1).

    >>> import minflux as mf, numpy as np
    >>> mf.squeeze(np.zeros((2, 1, 3, 1)), axis=1).shape
    (2, 3, 1)
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.squeeze")
    shape = tuple(v.shape)
    if axis is not None:
        for a in normalise_axes(axis, len(shape), "mf.squeeze", shape):
            if shape[a] != 1:
                raise ValueError(f"mf.squeeze: axis {a} of shape {shape} has length {shape[a]}, not 1")
    out = xp.squeeze(v, axis=axis)
    return record("squeeze", out, [x], lambda g, needs: [g.reshape(shape)])


def broadcast_to(x, shape):
    """``x`` repeated along new or length-1 axes to ``shape``; the gradient sums back.

    >>> import minflux as mf, numpy as np
    >>> mf.broadcast_to(np.array([1.0, 2.0]), (2, 2))
    array([[1., 2.],
           [1., 2.]])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.broadcast_to")
    old = tuple(getattr(v, "shape", ()))
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    try:
        out = xp.broadcast_to(v, shape)
    except ValueError as e:
        raise ValueError(f"mf.broadcast_to: cannot broadcast shape {old} to {shape}") from e
    return record("broadcast_to", out, [x], lambda g, needs: [sum_to(g, old)])


def _check_sequence(xs, op: str) -> list:
    if not isinstance(xs, (list, tuple)) or not xs:
        raise TypeError(f"{op} takes a non-empty list or tuple of arrays, got {type(xs).__name__}")
    return [value_of(x) for x in xs]


def _along(axis: int, ndim: int, index) -> tuple:
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


def concatenate(xs: Sequence, axis: int = 0):
    """Join arrays along an existing axis.

    >>> import minflux as mf, numpy as np
    >>> mf.concatenate([np.zeros((2, 3)), np.ones((1, 3))]).shape
    (3, 3)
    """
    values = _check_sequence(xs, "mf.concatenate")
    xp = get_array_module(*values, op="mf.concatenate")
    shapes = [tuple(getattr(v, "shape", ())) for v in values]
    if any(len(s) == 0 for s in shapes):
        raise ValueError(f"mf.concatenate: cannot join zero-dimensional arrays (shapes {shapes}); "
                         "use mf.stack")
    axis = normalise_axis(axis, len(shapes[0]), "mf.concatenate", shapes[0])
    try:
        out = xp.concatenate(values, axis=axis)
    except ValueError as e:
        raise ValueError(f"mf.concatenate: shapes {shapes} differ outside axis {axis}") from e
    ends = []
    total = 0
    for s in shapes:
        total += s[axis]
        ends.append(total)

    def vjp(g, needs):
        start = 0
        grads = []
        for k, end in enumerate(ends):
            grads.append(g[_along(axis, g.ndim, slice(start, end))] if needs[k] else None)
            start = end
        return grads

    return record("concatenate", out, list(xs), vjp)


def stack(xs: Sequence, axis: int = 0):
    """Join arrays of one shape along a new axis.

    >>> import minflux as mf, numpy as np
    >>> mf.stack([np.zeros(3), np.ones(3)], axis=1).shape
    (3, 2)
    """
    values = _check_sequence(xs, "mf.stack")
    xp = get_array_module(*values, op="mf.stack")
    shapes = [tuple(getattr(v, "shape", ())) for v in values]
    if len(set(shapes)) != 1:
        raise ValueError(f"mf.stack: all arrays must have one shape, got shapes {shapes}")
    axis = normalise_axis(axis, len(shapes[0]) + 1, "mf.stack", shapes[0])
    out = xp.stack(values, axis=axis)

    def vjp(g, needs):
        return [g[_along(axis, g.ndim, k)] if needs[k] else None for k in range(len(values))]

    return record("stack", out, list(xs), vjp)


def _join_parts(xp, gout, parts_shapes, shape, dtype, axis, squeezed):
    """One array of ``shape`` from per-part gradients along ``axis``; zeros only where one is missing."""
    if all(g is not None for g in gout):
        return xp.stack(gout, axis=axis) if squeezed else xp.concatenate(gout, axis=axis)
    full = xp.empty(shape, dtype=dtype)
    start = 0
    for g, part in zip(gout, parts_shapes):
        width = 1 if squeezed else part[axis]
        index = _along(axis, len(shape), start if squeezed else slice(start, start + width))
        full[index] = 0 if g is None else g
        start += width
    return full


def split(x, indices_or_sections, axis: int = 0) -> list:
    """Split ``x`` along ``axis`` into equal sections (an int) or at the given indices (a list).

    >>> import minflux as mf, numpy as np
    >>> [p.shape for p in mf.split(np.zeros((5, 2)), [1, 3])]
    [(1, 2), (2, 2), (2, 2)]
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.split")
    shape = tuple(v.shape)
    axis = normalise_axis(axis, v.ndim, "mf.split", shape)
    n = shape[axis]
    bounds = [0, *_split_indices(indices_or_sections, n, axis, shape), n]
    # basic slices, as numpy's split takes them (without its per-call overhead)
    cuts = [slice(start, end) for start, end in zip(bounds, bounds[1:])]
    parts = [v[_along(axis, v.ndim, cut)] for cut in cuts]
    part_shapes, dtype = [tuple(p.shape) for p in parts], v.dtype  # the closure must not hold v

    def vjp(gout, needs):
        if _tile(cuts, n):
            return [_join_parts(xp, gout, part_shapes, shape, dtype, axis, squeezed=False)]
        full = xp.zeros(shape, dtype=dtype)   # indices out of order: parts overlap
        for g, cut in zip(gout, cuts):
            if g is not None:
                full[_along(axis, len(shape), cut)] += g
        return [full]

    return list(record("split", parts, [x], vjp, multi=True))


def _tile(cuts: list, n: int) -> bool:
    """True when slices ``cuts`` of an axis of length ``n`` cover it in order, each element once."""
    end = 0
    for cut in cuts:
        start, stop, _ = cut.indices(n)
        if stop > start:
            if start != end:
                return False
            end = stop
    return end == n


def _split_indices(indices_or_sections, n: int, axis: int, shape: tuple) -> list:
    """Where `split` cuts an axis of length ``n``: the given indices, or those of equal sections."""
    try:
        sections = operator.index(indices_or_sections)
    except TypeError:
        return list(indices_or_sections)
    if sections < 1:
        raise ValueError(f"mf.split: the number of sections must be positive, got {sections}")
    if n % sections:
        raise ValueError(f"mf.split: axis {axis} of shape {shape} has length {n}, which "
                         f"does not split into {sections} equal sections")
    return [n // sections * k for k in range(1, sections)]


def unstack(x, axis: int = 0) -> list:
    """The slices of ``x`` along ``axis`` as a list, without that axis (``list(x)`` for axis 0).

    Prefer it to ``x[t]`` in a loop over time: one node whose gradient is assembled once.

    >>> import minflux as mf, numpy as np
    >>> [s.shape for s in mf.unstack(np.zeros((3, 2, 4)), axis=1)]
    [(3, 4), (3, 4)]
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.unstack")
    shape = tuple(v.shape)
    axis = normalise_axis(axis, v.ndim, "mf.unstack", shape)
    parts = [v[_along(axis, v.ndim, i)] for i in range(shape[axis])]
    part_shapes, dtype = [shape] * len(parts), v.dtype  # the closure must not hold v

    def vjp(gout, needs):
        return [_join_parts(xp, gout, part_shapes, shape, dtype, axis, squeezed=True)]

    return list(record("unstack", parts, [x], vjp, multi=True))
