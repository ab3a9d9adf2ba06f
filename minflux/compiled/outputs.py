"""The results of a compiled function: their shape recorded once, rebuilt on every replay, and
compared bit for bit with the eager function's in check mode.

`template` turns the recording call's result into a template: each traced array becomes the index
of an output slot, an argument's container the place it sits at (so a replay returns the caller's
own object, as the function did), an array made without any recorded operation a copy made on every
call (a replay must never hand out one shared buffer), and anything else stays as it is. `fill` makes
a replay's result from a template.

>>> import numpy as np
>>> from minflux.schedule import Recording
>>> x = Recording("f").input(np.ones(2))
>>> outs = []
>>> shape = template({"y": x, "n": 3}, outs, {})
>>> fill(shape, [np.zeros(2)], ())
{'y': array([0., 0.]), 'n': 3}
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .. import tree
from ..backend import is_array, to_numpy
from ..schedule import Traced
from ..schedule.traced import TracedGenerator
from . import guard


class ReplayMismatch(AssertionError):
    """In check mode, a replay's result differed from the eager function's.

    >>> import minflux as mf
    >>> issubclass(mf.ReplayMismatch, AssertionError)
    True
    """


class _Output(NamedTuple):
    index: int


class _Argument(NamedTuple):
    place: tuple


class _Fresh(NamedTuple):
    array: Any


class _Node(NamedTuple):
    container: Any
    children: tuple   # (key, template) pairs


def template(result, outs: list, containers: dict):
    """The template of ``result`` (see the module docstring); traced arrays are appended to ``outs``."""
    memo: dict = {}

    def visit(x):
        if x.__class__ is Traced:
            for i, t in enumerate(outs):
                if t is x:
                    return _Output(i)
            outs.append(x)
            return _Output(len(outs) - 1)
        if x.__class__ is TracedGenerator:
            x = x.recorded_value
        place = containers.get(id(x))
        if place is not None:
            return _Argument(place)
        if is_array(x):
            return _Fresh(x)
        if id(x) in memo:
            return memo[id(x)]
        kids = tree.children(x)
        if kids is None:
            return x
        out = _Node(x, tuple((k, visit(child)) for k, child in kids))
        memo[id(x)] = out
        return out

    return visit(result)


def fill(shape, outputs: list, args: tuple):
    """A result from a template: output ``i`` is ``outputs[i]``."""
    cls = shape.__class__
    if cls is _Output:
        return outputs[shape.index]
    if cls is _Node:
        return tree.rebuild(shape.container, {k: fill(t, outputs, args) for k, t in shape.children})
    if cls is _Argument:
        return guard.get(args, shape.place)
    if cls is _Fresh:
        return shape.array.copy()
    return shape


def compare(expected, got, what: str) -> None:
    """Raise `ReplayMismatch` unless ``got`` has ``expected``'s structure and the same bits in every
    array and number.

    >>> compare({"a": np.array([0.0])}, {"a": np.array([-0.0])}, "the result")
    Traceback (most recent call last):
    ...
    minflux.compiled.outputs.ReplayMismatch: the result differs at a: the eager function gave [0.], the replay [-0.]
    """
    a, b = guard.flatten((expected,)), guard.flatten((got,))
    if [k[0] for k in a.key[0]] != [k[0] for k in b.key[0]]:
        raise ReplayMismatch(f"{what} has another structure than the eager function's")
    for places, x, y in zip(a.places, a.leaves, b.leaves):
        if isinstance(x, np.random.Generator):
            same = x.bit_generator.state == y.bit_generator.state
        else:
            x, y = to_numpy(x), to_numpy(y)
            same = x.shape == y.shape and x.dtype == y.dtype and x.tobytes() == y.tobytes()
        if not same:
            where = ".".join(str(k) for k in places[0][1:]) or "the value"
            raise ReplayMismatch(f"{what} differs at {where}: the eager function gave {x}, the replay {y}")
    for place, x in a.values.items():
        y = b.values.get(place)
        if type(x) is not type(y) or (isinstance(x, (int, float, complex, np.generic, str, bool)) and
                                      np.asarray(x).tobytes() != np.asarray(y).tobytes()):
            where = ".".join(str(k) for k in place[1:]) or "the value"
            raise ReplayMismatch(f"{what} differs at {where}: the eager function gave {x!r}, the replay {y!r}")
