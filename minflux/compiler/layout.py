"""How a kernel walks one call's arrays: a ``(rows, inner)`` view of the broadcast shape.

Each input is read in its smallest form: a full array whose rows are contiguous, read in place one
row stride apart (a column slice of a wider array needs no copy; a transpose is copied), a per-row
vector, a per-column vector, or a single value. The CPU kernels loop over these rows, and the row
pool splits them between threads.

>>> import numpy as np
>>> plan_layout([np.ones((3, 1)), np.ones((3, 4))], (3, 4)).patterns
('R', 'F')
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

__all__ = ["Layout", "Plan", "plan", "plan_layout", "read", "row_stride", "signature"]

_FLAT_BLOCK = 1 << 14


class Layout(NamedTuple):
    """How a kernel walks one call's arguments: a ``(rows, inner)`` view of the broadcast shape of
    ``total`` elements, each input's pattern, each input as the array whose first element the kernel
    reads from, and the row stride (in elements) of each full input."""

    rows: int
    inner: int
    total: int
    patterns: tuple
    flats: list
    strides: tuple


@lru_cache(maxsize=1024)
def _plan(shapes: tuple, shape: tuple, split: int | None = None):
    """The layout for argument ``shapes`` broadcast to ``shape`` (see `plan_layout`), memoised.

    ``split`` asks for rows over the first ``split`` dimensions of ``shape`` that are not 1 (a layout
    whose inputs all cover the whole shape or nothing of it can take any split).
    """
    total = math.prod(shape)
    d = len(shape)
    keep = [i for i in range(d) if shape[i] != 1]
    dims = [shape[i] for i in keep]
    masks = []
    for s in shapes:
        padded = (1,) * (d - len(s)) + tuple(s)
        masks.append(tuple(padded[i] != 1 for i in keep))
    r = len(dims)

    def fits(mask, p):
        return len(set(mask[:p])) <= 1 and len(set(mask[p:])) <= 1

    if not all(len(set(m)) <= 1 for m in masks):
        split = next((p for p in range(r - 1, 0, -1) if all(fits(m, p) for m in masks)), r - 1)
    if split is None:
        inner = min(total, _FLAT_BLOCK) or 1
        rows = -(-total // inner) if total else 0
    else:
        rows, inner = math.prod(dims[:split]), math.prod(dims[split:])
    patterns, materialise = [], []
    for s, mask in zip(shapes, masks):
        if split is not None and not fits(mask, split):
            patterns.append("F")
            materialise.append(True)
            continue
        outer_full = any(mask[:split]) if split is not None else any(mask)
        inner_full = any(mask[split:]) if split is not None else any(mask)
        pattern = "F" if outer_full and inner_full else "R" if outer_full else "C" if inner_full else "S"
        patterns.append(pattern)
        materialise.append(pattern == "F" and tuple(s) != tuple(shape))
    return rows, inner, total, tuple(patterns), tuple(materialise), split, r


def row_stride(a: np.ndarray, inner: int) -> int | None:
    """The distance in elements between consecutive rows of ``a`` seen as ``(a.size // inner, inner)``
    rows that are each contiguous, or None when ``a`` cannot be read that way without a copy
    (its last ``inner`` elements are not contiguous, rows are not equally spaced, or run backwards).

    >>> x = np.zeros((4, 10), np.float32)
    >>> row_stride(x[:, :3], 3), row_stride(x.T, 4), row_stride(x[::2, 2:8], 6)
    (10, None, 20)
    """
    item = a.itemsize
    dims = [(n, st) for n, st in zip(a.shape, a.strides) if n != 1]
    expected, covered = item, 1
    while dims and covered < inner:          # the inner dimensions: contiguous, innermost first
        n, st = dims.pop()
        if st != expected:
            return None
        covered *= n
        expected *= n
    if covered != inner:
        return None
    if not dims:
        return inner
    count, step = dims.pop()                 # the row dimensions: every row one step further
    for n, st in reversed(dims):
        if st != step * count:
            return None
        count *= n
    if step < 0 or step % item:
        return None
    return step // item


class Plan(NamedTuple):
    """A layout decided from the arguments' shapes, strides and dtypes alone, so it holds for every
    call whose arrays have the same ones (`signature`): the ``(rows, inner)`` view, each input's
    pattern, the row stride of each full input and how each input is read (`READ_IN_PLACE`,
    `READ_COPY`, `READ_BROADCAST`, `READ_BROADCAST_COPY`)."""

    rows: int
    inner: int
    total: int
    patterns: tuple
    strides: tuple
    reads: tuple


READ_IN_PLACE, READ_COPY, READ_BROADCAST, READ_BROADCAST_COPY = range(4)


def signature(arrays: list) -> tuple:
    """What a `Plan` depends on: each array's type, shape, strides and dtype.

    >>> import numpy as np
    >>> signature([np.zeros((2, 3), np.float32)])
    ((<class 'numpy.ndarray'>, (2, 3), (12, 4), dtype('float32')),)
    """
    return tuple((a.__class__, a.shape, a.strides, a.dtype) for a in arrays)


def plan(arrays: list, shape: tuple) -> Plan:
    """Choose the ``(rows, inner)`` view, each input's pattern, the row stride of each full input and
    how each input is read (see `plan_layout`); memoised by the arrays' `signature`.

    >>> import numpy as np
    >>> plan([np.ones((3, 1)), np.ones((3, 10))[:, :4]], (3, 4))
    Plan(rows=3, inner=4, total=12, patterns=('R', 'F'), strides=(10,), reads=(0, 0))
    """
    key = (signature(arrays), shape)
    found = _plans.get(key)
    if found is None:
        if len(_plans) >= _PLANS_LIMIT:
            _plans.clear()
        found = _plans[key] = _decide(arrays, shape)
    return found


_plans: dict = {}
_PLANS_LIMIT = 4096


def _decide(arrays: list, shape: tuple) -> Plan:
    shapes = tuple(a.shape for a in arrays)
    rows, inner, total, patterns, materialise, split, r = _plan(shapes, shape)
    strided = [a for a, p in zip(arrays, patterns) if p == "F" and not a.flags.c_contiguous]
    if split is None and r > 1 and strided:
        best = 0          # the split that reads the most strided inputs in place, widest rows first
        for p in range(1, r):
            candidate = _plan(shapes, shape, p)
            readable = sum(row_stride(a, candidate[1]) is not None for a in strided)
            if readable > best:
                best, (rows, inner, total, patterns, materialise, split, r) = readable, candidate
            if best == len(strided):
                break
    reads, strides = [], []
    for a, pattern, full in zip(arrays, patterns, materialise):
        broadcast = READ_BROADCAST - READ_IN_PLACE if full else 0
        if full:
            a = np.broadcast_to(a, shape)
        if pattern != "F":   # a numpy scalar has no address of its own: it is copied into an array
            in_place = a.flags.c_contiguous and a.__class__ is np.ndarray
            reads.append(broadcast + (READ_IN_PLACE if in_place else READ_COPY))
            continue
        stride = inner if a.flags.c_contiguous else row_stride(a, inner)
        reads.append(broadcast + (READ_IN_PLACE if stride is not None else READ_COPY))
        strides.append(inner if stride is None else stride)
    return Plan(rows, inner, total, tuple(patterns), tuple(strides), tuple(reads))


def read(a, how: int, shape: tuple):
    """Input ``a`` as the array a kernel reads, as `Plan.reads` says (its first element is where the
    kernel starts; the pattern decides how many it reads).

    >>> import numpy as np
    >>> read(np.arange(6.0).reshape(2, 3).T, READ_COPY, (3, 2)).flags.c_contiguous
    True
    """
    if how >= READ_BROADCAST:
        a = np.broadcast_to(a, shape)
    if how == READ_COPY or how == READ_BROADCAST_COPY:
        a = np.ascontiguousarray(a)
    return a


def plan_layout(arrays: list, shape: tuple) -> Layout:
    """Choose the ``(rows, inner)`` view, each input's pattern, the array it is read from and the row
    stride of each full input.

    A full input whose rows are contiguous but spaced apart (a column slice ``s[:, :k]`` of a wider
    array, a row-broadcast view) is read in place through its row stride; only an input whose rows
    are not contiguous (a transpose) is copied first.

    >>> import numpy as np
    >>> layout = plan_layout([np.ones((3, 1)), np.ones((3, 4)), np.ones(())], (3, 4))
    >>> layout.rows, layout.inner, layout.total, layout.patterns, layout.strides
    (3, 4, 12, ('R', 'F', 'S'), (4,))
    >>> plan_layout([np.ones((3, 10))[:, :4]], (3, 4)).strides    # read in place, 10 apart
    (10,)
    """
    p = plan(arrays, shape)
    flats = [read(a, how, shape) for a, how in zip(arrays, p.reads)]
    flats = [f if pattern == "F" else f.reshape(-1) for f, pattern in zip(flats, p.patterns)]
    return Layout(p.rows, p.inner, p.total, p.patterns, flats, p.strides)
