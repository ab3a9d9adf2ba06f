"""Helpers shared by the structural ops: argument values, axis normalisation, shape messages."""
from __future__ import annotations

import numpy as np

from ..backend import is_array
from ..tensor import Tensor


def value_of(x):
    """The array inside a Tensor, an array itself, or a number or nested list as a numpy array."""
    if isinstance(x, Tensor):
        return x.value
    return x if is_array(x) else np.asarray(x)


def shape_of(x) -> tuple:
    return tuple(getattr(value_of(x), "shape", ()))


def normalise_axes(axis, ndim: int, op: str, shape: tuple) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if not -ndim <= a < ndim or (ndim == 0 and a not in (0, -1)):
            raise ValueError(f"{op}: axis {a} is out of range for an array of shape {shape}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def normalise_axis(axis: int, ndim: int, op: str, shape: tuple) -> int:
    """One axis as a non-negative int."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    return normalise_axes(axis, ndim, op, shape)[0]


def keepdims_shape(shape: tuple, axes: tuple[int, ...]) -> tuple:
    """``shape`` with the reduced ``axes`` set to 1 (the shape of a keepdims reduction)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def constant_result(value, args):
    """The result of an op with no gradient: an untracked Tensor when an argument is a Tensor."""
    for a in args:
        if isinstance(a, Tensor):
            return Tensor(value)
    return value
