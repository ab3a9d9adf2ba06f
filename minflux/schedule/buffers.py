"""The buffers a replay allocates once: a schedule's intermediate arrays, planned when it is recorded.

A step that makes new arrays and can write them into given ones (a ufunc, a concatenation, the matrix
product, a compiled kernel: ``results="out"``) writes, on replay, into a buffer the replay owns,
with the recorded shape and dtype, at an offset of one arena allocated once. Buffers whose lives do
not overlap share memory: planning follows every array a step may hand back or view (an index, a
reshape, an operation that may return its argument), and a buffer's memory goes to a later buffer
only after the last use of everything that may share it. Memory that reaches the replay's results
or a function whose behaviour is not declared here is never planned: such a function might keep the
array or give it back, so its arrays stay new on every call. Only plain numpy arrays of a fixed
shape are planned; CuPy's memory pool already reuses device memory.

A function's behaviour, ``kind``: ``"out"`` makes new arrays and writes them into ``out=`` when
given; ``"new"`` makes new arrays (or none) and keeps nothing it got; ``"views"`` may return its
arguments or views of them and keeps nothing. Operations declare theirs (``operation(results=...)``).

>>> import numpy as np
>>> from minflux.schedule.recorder import Recording
>>> rec = Recording("f")
>>> x = rec.input(np.ones(1000))
>>> y = np.negative(np.exp(x) + 1.0) * 2.0     # exp's result dies when the sum is made: reused
>>> plan = plan_buffers(rec, [y.slot])
>>> sorted(plan.outs), plan.nbytes // 8000          # exp, add and negative write into two buffers' room
([0, 1, 2], 2)
"""
from __future__ import annotations

import bisect
import heapq
import math
import operator
from typing import NamedTuple

import numpy as np

from .recorder import Declared, Recording, Ref
from .traced import _METHOD_CALLERS

OUT, NEW, VIEWS = "out", "new", "views"

_FUNCTIONS = {
    np.concatenate: OUT, np.stack: OUT, np.take: OUT,
    np.where: NEW, np.vdot: NEW, np.dot: NEW, np.sum: NEW, np.copy: NEW, np.zeros_like: NEW,
    np.ones_like: NEW, np.full_like: NEW, np.empty_like: NEW, np.outer: NEW, np.tensordot: NEW,
    operator.setitem: NEW,
    np.einsum: VIEWS,   # a transposition or a diagonal comes back as a view
    operator.getitem: VIEWS, np.reshape: VIEWS, np.transpose: VIEWS, np.moveaxis: VIEWS,
    np.swapaxes: VIEWS, np.squeeze: VIEWS, np.expand_dims: VIEWS, np.broadcast_to: VIEWS,
    np.split: VIEWS, np.array_split: VIEWS, np.ravel: VIEWS, np.atleast_1d: VIEWS, np.atleast_2d: VIEWS,
    np.ascontiguousarray: VIEWS,
}
_METHODS = {
    "sum": OUT, "mean": NEW, "max": NEW, "min": NEW, "prod": NEW, "copy": NEW, "flatten": NEW,
    "dot": NEW, "fill": NEW,
    "reshape": VIEWS, "view": VIEWS, "transpose": VIEWS, "swapaxes": VIEWS, "squeeze": VIEWS,
    "ravel": VIEWS, "astype": VIEWS,   # astype(copy=False) may return the array itself
}
_ATTRIBUTE_GETTERS = {repr(operator.attrgetter(name)) for name in ("T", "mT", "real", "imag")}


def kind(fn, args: tuple, kwargs: dict, declared: Declared | None = None) -> str | None:
    """How ``fn(*args, **kwargs)`` treats the arrays it gets (see the module docstring), an
    operation's by what it ``declared``; None when unknown.

    >>> kind(np.add, (1, 2), {}), kind(np.add, (1, 2), {"out": 3}), kind(print, (), {})
    ('out', 'views', None)
    >>> kind(print, (), {}, Declared("new"))
    'new'
    """
    if "out" in kwargs:
        return VIEWS   # it writes into a given array and returns that
    if isinstance(fn, np.ufunc):
        if len(args) > fn.nin or "where" in kwargs:
            return VIEWS
        return OUT if fn.nout == 1 else NEW
    if declared is not None:
        return declared.results
    try:
        found = _FUNCTIONS.get(fn)
    except TypeError:   # an unhashable callable
        return None
    if found is not None:
        return NEW if found == OUT and "dtype" in kwargs else found
    name = getattr(fn, "__name__", "")
    if name.startswith("ndarray."):
        if _METHOD_CALLERS.get(name[8:]) is fn:
            return _METHODS.get(name[8:])
    if fn.__class__ is operator.attrgetter and repr(fn) in _ATTRIBUTE_GETTERS:
        return VIEWS
    return None


class Plan(NamedTuple):
    """``outs``: step index -> the ``out=`` value its replay passes (an array, or a list with None
    for an output left new); ``arena``: the memory every buffer is a view of.

    >>> Plan({}, np.empty(0, np.uint8)).nbytes
    0
    """

    outs: dict
    arena: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.arena.nbytes


def plan_buffers(recording: Recording, outputs: list[int], apart=None) -> Plan:
    """The buffers of ``recording``'s replay that returns slots ``outputs`` (see the module docstring).

    ``apart(step, layouts)``, where given, names the steps whose results may run beside the one
    before them that it names (`native_groups`): their buffers take no memory freed since that one
    was placed, which the operations between may have used."""
    steps, layouts = recording.steps, recording.layouts
    shares: dict[int, frozenset] = {}   # slot -> the buffers (named by their slot) it may share memory with
    born: dict[int, int] = {}           # buffer -> the step making it
    last: dict[int, int] = {}           # buffer -> the last step using memory it may share
    barred: set = set()
    fresh_from = recording.n_inputs     # slots from here on are not made yet
    empty = frozenset()
    for i, step in enumerate(steps):
        reached = empty
        for slot in _refs(step.args, step.kwargs):
            got = shares.get(slot)
            if got:
                reached = got if not reached else reached | got
                for b in got:
                    last[b] = i
        if step.out is None and reached is empty:
            continue
        how = kind(step.fn, step.args, step.kwargs, step.declared)
        if how is None:
            barred |= reached
        if step.out is None:
            continue
        if how == VIEWS and reached:
            viewed = step.declared.views_of if step.declared is not None else None
            if viewed is not None:
                reached = _shared_by(viewed, step.args, step.kwargs, shares)
        if how == OUT and step.out.__class__ is not Ref and not _flat(step.out):
            how = NEW   # its results are new; only a result or a flat list of them is written into buffers
        top = fresh_from
        for slot in _out_slots(step.out):
            if slot is None:
                continue
            top = max(top, slot + 1)
            if slot >= fresh_from:
                if how == OUT and slot in layouts:
                    shares[slot] = frozenset((slot,))
                    born[slot] = last[slot] = i
                elif how == VIEWS and reached:
                    shares[slot] = reached
            elif how is not None and reached:   # an array it was given, handed back
                shares[slot] = shares.get(slot, empty) | reached
        fresh_from = top
    for slot in outputs:
        barred |= shares.get(slot, empty)
    kept_apart = {i for i in set(born.values()) if apart(steps[i], layouts)} if apart is not None else set()
    return _assign(steps, layouts, born, last, barred, kept_apart)


def _assign(steps: list, layouts: dict, born: dict, last: dict, barred: set, kept_apart: set) -> Plan:
    """Each planned buffer at an offset of one arena, placed in the order the buffers are made as an
    allocator would place them: in the smallest free range that fits, or at the end; a buffer made
    by a step of ``kept_apart`` in none freed since the last such buffer was placed."""
    free = _FreeRanges()
    living: list = []   # heap of (last step, offset, size) of the buffers in use
    placed: dict[int, int] = {}
    recent: list = []   # (offset, size) freed since a step kept apart was last placed
    for slot in sorted(born, key=born.__getitem__):
        if slot in barred:
            continue
        while living and living[0][0] < born[slot]:
            _, offset, size = heapq.heappop(living)
            free.release(offset, size)
            recent.append((offset, size))
        shape, dtype = layouts[slot]
        size = -(-math.prod(shape) * dtype.itemsize // _ALIGN) * _ALIGN
        if born[slot] in kept_apart:
            placed[slot], recent = free.take(size, recent), []
        else:
            placed[slot] = free.take(size)
        heapq.heappush(living, (last[slot], placed[slot], size))
    arena = np.empty(free.top + _ALIGN, np.uint8)
    skip = -arena.ctypes.data % _ALIGN
    views = {slot: np.ndarray(layouts[slot][0], layouts[slot][1], buffer=arena, offset=skip + offset)
             for slot, offset in placed.items()}
    outs: dict = {}
    for i in sorted({born[slot] for slot in views}):
        out = steps[i].out
        outs[i] = views[out.slot] if out.__class__ is Ref else [views.get(s) for s in _out_slots(out)]
    return Plan(outs, arena)


_ALIGN = 64   # bytes: a cache line, and every vector load of a row starts aligned as numpy's own arrays do


class _FreeRanges:
    """The free byte ranges below ``top`` of an arena that grows at its end: best fit, merged when
    neighbours."""

    def __init__(self):
        self.top = 0
        self.starts: list[int] = []                # sorted
        self.sizes: dict[int, int] = {}            # start -> size
        self.of_size: dict[int, list[int]] = {}    # size -> starts

    def take(self, size: int, avoid: list = ()) -> int:
        """The start of ``size`` bytes, in no free range that meets a range (start, size) of ``avoid``."""
        def clear(start: int) -> bool:
            end = start + self.sizes[start]
            return not any(start < a + n and a < end for a, n in avoid)

        exact = self.of_size.get(size)
        if exact and avoid:
            exact = [start for start in exact if clear(start)]
        if exact:
            best = exact[-1]
        else:
            best = None
            for start in self.starts:
                have = self.sizes[start]
                if have > size and (best is None or have < self.sizes[best]) and (not avoid or clear(start)):
                    best = start
        if best is None:
            if self.starts and self.starts[-1] + self.sizes[self.starts[-1]] == self.top and clear(self.starts[-1]):
                best = self.starts[-1]              # the last range grows to fit
                self._remove(best)
                self.top = best + size
                return best
            best, self.top = self.top, self.top + size
            return best
        have = self._remove(best)
        if have > size:
            self._insert(best + size, have - size)
        return best

    def release(self, start: int, size: int) -> None:
        k = bisect.bisect_left(self.starts, start)
        if k < len(self.starts) and start + size == self.starts[k]:
            size += self._remove(self.starts[k])
        if k > 0 and self.starts[k - 1] + self.sizes[self.starts[k - 1]] == start:
            start = self.starts[k - 1]
            size += self._remove(start)
        self._insert(start, size)

    def _insert(self, start: int, size: int) -> None:
        bisect.insort(self.starts, start)
        self.sizes[start] = size
        self.of_size.setdefault(size, []).append(start)

    def _remove(self, start: int) -> int:
        del self.starts[bisect.bisect_left(self.starts, start)]
        size = self.sizes.pop(start)
        self.of_size[size].remove(start)
        return size


def _shared_by(viewed: tuple, args: tuple, kwargs: dict, shares: dict) -> frozenset:
    """The buffers the arguments at positions (or of names) ``viewed`` may share memory with."""
    positions, names = viewed
    chosen = [args[k] for k in positions if k < len(args)] + [kwargs[n] for n in names if n in kwargs]
    found = set()
    for slot in _refs(tuple(chosen), {}):
        found.update(shares.get(slot, ()))
    return frozenset(found)


def _refs(args: tuple, kwargs: dict):
    yield from _slots(args)
    yield from _slots(kwargs)


def _slots(x, holes: bool = False):
    """The slots of the `Ref`s in ``x`` in order; with ``holes``, None for each None in a list or tuple."""
    cls = x.__class__
    if cls is Ref:
        yield x.slot
    elif cls is tuple or cls is list:
        for item in x:
            if item is None and holes:
                yield None
            else:
                yield from _slots(item, holes)
    elif cls is dict:
        for item in x.values():
            yield from _slots(item, holes)


def _flat(out) -> bool:
    return bool(out) and all(o.__class__ is Ref or o is None for o in out)


def _out_slots(out):
    """The slots of a step's result in order, None where an output holds no array."""
    return _slots(out, holes=True)
