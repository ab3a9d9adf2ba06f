"""A gradient that is zero except at an index: what indexing ops hand the tape instead of a
mostly-zero array, so that many slices of one array accumulate into one buffer."""
from __future__ import annotations

from .backend import get_array_module, scatter_add
from .schedule import operation

__all__ = ["IndexedGrad"]


class IndexedGrad:
    """A gradient that is zero except at ``index``, where it holds ``values``.

    VJPs of indexing ops return one instead of a mostly-zero array, so that many slices of one array
    (``x[t]`` in a time loop, embedding lookups per step) accumulate into a single buffer on the tape
    rather than allocating a full-size zero array each. ``unique`` says that ``index`` selects no
    element twice (basic slices, boolean masks), so assignment suffices; otherwise values scatter-add.

    >>> import numpy as np
    >>> IndexedGrad((3,), np.dtype("float64"), np.array([0, 0, 2]), np.ones(3), unique=False).dense()
    array([2., 0., 1.])
    """

    __slots__ = ("shape", "dtype", "index", "values", "unique")

    def __init__(self, shape: tuple, dtype, index, values, unique: bool):
        self.shape, self.dtype, self.index, self.values, self.unique = shape, dtype, index, values, unique

    def add_into(self, buffer) -> None:
        """Add this gradient into ``buffer`` (an array of ``shape``) in place."""
        _add_at(buffer, self.index, self.values, self.unique)

    def dense(self):
        """This gradient as a full array."""
        return _dense(self.shape, self.dtype, self.index, self.values, self.unique)


@operation(results="new")
def _add_at(buffer, index, values, unique: bool) -> None:
    if unique:
        buffer[index] += values
    else:
        scatter_add(buffer, index, values)


@operation(results="new")
def _dense(shape: tuple, dtype, index, values, unique: bool):
    buffer = get_array_module(values).zeros(shape, dtype=dtype)
    _add_at(buffer, index, values, unique)
    return buffer
