"""Results a native command writes into arrays that are new on every call, as its Python call's are.

A launch whose results reach the replay's results (an optimiser's new state, say) gets no planned
buffer: each call must hand back arrays of its own, which nothing else holds. Its command writes
them all the same. At the probe the command is made for the arrays that call returned; on every
later call the native form makes arrays of the same shapes and dtypes (`NewResults.layouts`) before
the replay runs, writes their addresses into the command's words as an input's are
(`minflux.schedule.native`), and the statement that bound the call's results binds these instead
(`rendered`). A numpy scalar result (`minflux.schedule.native_probe.Item`) is made as a 0-d array,
and bound as its element once the command wrote it.

>>> import numpy as np
>>> from minflux.runtime.native_runner import Command
>>> from minflux.schedule.native_places import Places
>>> out = np.empty(3)
>>> new = NewResults({7: (Command([out.ctypes.data], (0,)), [out])}, Places(np.empty(0), [], [], []))
>>> new.arrays[0] is out, new.owner
(True, [(7, 0)])
>>> used, layouts, (template,) = new.layouts([new.template(7, [out], lambda r: False)])
>>> used, layouts
([0], [((3,), dtype('float64'))])
>>> made = [np.empty(shape, dtype) for shape, dtype in layouts]
>>> filled(template, made)[0] is made[0]
True
"""
from __future__ import annotations

import numpy as np

from ..runtime.pointers import pointers
from .native_probe import Item, _result_arrays

__all__ = ["NewResults", "filled", "marks", "rendered"]


class _Made(int):
    """In a result's template: the array made on each call for new result ``int(self)``."""


class _MadeItem(_Made):
    """A `_Made` bound as that array's element, a numpy scalar."""


class NewResults:
    """The arrays a probe's commands returned that lie nowhere a replay knows (not in its arena, not
    in an input, not held): candidates for arrays made anew on every call. ``arrays[k]`` is the
    probe's, ``owner[k]`` (the statement whose call returned it, its place among that result's arrays);
    only C-contiguous arrays that own their memory qualify, so that one made with the same shape and
    dtype is laid out alike."""

    def __init__(self, commands: dict, places):
        self.arrays: list = []
        self.owner: list = []
        self._at: dict = {}   # id of a probe's array -> its k
        for index, (_, result) in commands.items():
            for r in _result_arrays(result):
                if (r.base is None and r.flags.c_contiguous and r.nbytes and id(r) not in self._at
                        and places.locate(pointers([r])[0]) is None):
                    self._at[id(r)] = len(self.arrays)
                    self.arrays.append(r)
                    self.owner.append((index, next(i for i, a in enumerate(_result_arrays(result)) if a is r)))

    def template(self, index: int, result, stays):
        """Statement ``index``'s ``result`` with each array it made new replaced by its mark (`filled`
        puts a call's arrays there), or None where one of its arrays neither is one of those nor
        ``stays(array)`` (lies in memory that stays put)."""
        if result.__class__ is Item:
            k = self._at.get(id(result.array))
            return _MadeItem(k) if k is not None and self.owner[k][0] == index else None
        if result.__class__ is np.ndarray:
            k = self._at.get(id(result))
            if k is not None and self.owner[k][0] == index:
                return _Made(k)
            return result if stays(result) else None
        if result.__class__ is list or result.__class__ is tuple:
            items = [self.template(index, r, stays) for r in result]
            return None if any(i is None for i in items) else result.__class__(items)
        return result

    def layouts(self, templates: list) -> tuple[list, list, list]:
        """For the ``templates`` of the statements that became commands: the k of each new array they
        mark, in order, its (shape, dtype), and the templates marking each by its place in that order."""
        used = sorted({k for t in templates for k in marks(t)})
        place = {k: p for p, k in enumerate(used)}
        return used, [(self.arrays[k].shape, self.arrays[k].dtype) for k in used], \
            [_replaced(t, lambda mark: mark.__class__(place[mark])) for t in templates]


def filled(template, made):
    """``template`` (`NewResults.template`) with each mark ``k`` replaced by ``made[k]``."""
    return _replaced(template, made.__getitem__)


def _replaced(template, by):
    """``template`` with each mark replaced by ``by(mark)``."""
    if isinstance(template, _Made):
        return by(template)
    cls = template.__class__
    if cls is list or cls is tuple:
        return cls(_replaced(t, by) for t in template)
    return template


def rendered(template, made: list) -> tuple[str, list]:
    """``template`` as the text of a statement's expression (``$`` for each of its params) that gives
    it with each mark ``k`` replaced by ``made[k]`` when it runs.

    >>> rendered((_Made(1), "a"), ["x", "y"])
    ('($[1], $,)', [['x', 'y'], 'a'])
    """
    if isinstance(template, _Made):
        return f"$[{int(template)}]" + ("[()]" if template.__class__ is _MadeItem else ""), [made]
    cls = template.__class__
    if cls is list or cls is tuple:
        parts = [rendered(t, made) for t in template]
        text = ", ".join(text for text, _ in parts)
        return (f"[{text}]" if cls is list else f"({text},)"), [p for _, params in parts for p in params]
    return "$", [template]


def marks(template) -> list:
    """The marks in ``template`` (`NewResults.template`): the new results it stands for.

    >>> marks([_Made(2), np.ones(1), (_Made(0),)])
    [2, 0]
    """
    if isinstance(template, _Made):
        return [int(template)]
    if template.__class__ is list or template.__class__ is tuple:
        return [k for t in template for k in marks(t)]
    return []
