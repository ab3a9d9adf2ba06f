"""The guard of a compiled function: what must be the same for a recorded schedule to be replayed.

`flatten` walks the arguments (trees of arrays, as everywhere in minflux) once and returns their
array leaves, the positions where they sit, and the *guard key*: the tree structure, each array's
shape, dtype and device (and which leaves are one tied array), the value of every other leaf
(numbers, strings, flags, rules) and the process settings a recording depends on (fusion, kernel
backend and mode, threads, the loop cap). A replay is used only for an equal key, so it never runs
on arguments it was not recorded for; a value that changes from call to call must be an array.

>>> import numpy as np
>>> flat = flatten(({"w": np.zeros((2, 3)), "lr": 0.1},))
>>> len(flat.leaves), flat.places[0]
(1, [(0, 'w')])
>>> flatten(({"w": np.zeros((2, 3)), "lr": 0.2},)).key == flat.key
False
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .. import tree
from ..backend import default_dtype, is_array, is_cupy_array
from ..compiler.compiled import get_elementwise_backend
from ..compiler.loop_limit import get_max_loop_iterations
from ..compiler.threads import get_num_threads
from ..pointwise.lazy import set_fusion
from ..tensor import Tensor

GENERATOR = "generator"
_SCALARS = frozenset({int, float, bool, str, type(None)})


def settings() -> tuple:
    """The process settings a recording depends on."""
    fusion = set_fusion()
    return (tuple(sorted(fusion.items())), get_elementwise_backend(), get_num_threads(),
            get_max_loop_iterations(), default_dtype().str)


class Flat(NamedTuple):
    """The walk of a call's arguments: unique array (and generator) ``leaves``, the positions of each
    (``places[k]``, several for a tied array), the guard ``key``, the positions of the other leaves
    (``values``, with their values), the positions of the mutable containers by id, and ``held``,
    the objects whose ids are in the key (kept alive with it)."""

    leaves: list
    places: list
    key: tuple
    values: dict
    containers: dict
    held: list


def flatten(args: tuple) -> Flat:
    """Walk ``args`` (see `Flat` and the module docstring). Random generators are leaves: a replay
    draws from the generator it is given, as the function would."""
    leaves, places, key, held = [], [], [], []
    seen: dict[int, int] = {}
    values: dict = {}
    containers: dict = {}

    def leaf(x, place, kind):
        first = seen.get(id(x))
        if first is not None:
            key.append(("tied", first))
            places[first].append(place)
            return
        seen[id(x)] = len(leaves)
        leaves.append(x)
        places.append([place])
        key.append(kind)

    def visit(x, place):
        cls = x.__class__
        if cls is np.ndarray:       # the common cases first, each as `tree.children` would see it
            leaf(x, place, ("array", x.shape, x.dtype.str, "cpu"))
            return
        if cls in _SCALARS:
            values[place] = x
            key.append(("value", (cls, x)))
            return
        if cls is list or cls is tuple or cls is dict:
            node(x, list(enumerate(x) if cls is not dict else x.items()), place)
            return
        if isinstance(x, Tensor):
            x = x.value
        if is_array(x):
            leaf(x, place, ("array", x.shape, x.dtype.str, "gpu" if is_cupy_array(x) else "cpu"))
            return
        if isinstance(x, np.random.Generator):
            leaf(x, place, (GENERATOR,))
            return
        kids = tree.children(x)
        if kids is None:
            values[place] = x
            key.append(("value", _static(x, held)))
            return
        node(x, kids, place)

    def node(x, kids, place):
        if not isinstance(x, tuple):
            containers.setdefault(id(x), place)
        key.append(("node", type(x), tuple(k for k, _ in kids)))
        for k, child in kids:
            visit(child, place + (k,))

    for i, a in enumerate(args):
        visit(a, (i,))
    return Flat(leaves, places, (tuple(key), settings()), values, containers, held)


def _static(x: Any, held: list):
    try:
        hash(x)
    except TypeError:
        held.append(x)
        return ("object", type(x), id(x))
    return (type(x), x)


def difference(old: tuple, new: tuple) -> str:
    """What changed between two guard keys, in words (for the warning about repeated recordings).

    >>> a = flatten((np.zeros(2), 1.0)).key
    >>> difference(a, flatten((np.zeros(3), 1.0)).key)
    'argument leaf 0 changed from array (2,) float64 to array (3,) float64'
    """
    if old[1] != new[1]:
        return "the process settings (fusion, kernel backend, threads or loop cap) changed"
    a, b = old[0], new[0]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"argument leaf {i} changed from {_describe(x)} to {_describe(y)}"
    return "the structure of the arguments changed"


def _describe(entry: tuple) -> str:
    kind = entry[0]
    if kind == "array":
        return f"array {entry[1]} {np.dtype(entry[2])}"
    if kind == "value":
        value = entry[1]
        return f"the value {value[1]!r}" if value[0] != "object" else f"a {value[1].__name__} object"
    if kind == "node":
        return f"a {entry[1].__name__} with keys {list(entry[2])}"
    return kind


def get(root_args: tuple, place: tuple):
    """The value at ``place`` under the argument tuple."""
    x = root_args
    for k in place:
        x = _child(x, k)
    return x


def _child(x, k):
    if isinstance(x, (list, tuple, dict)):
        return x[k]
    return getattr(x, k)


def put(root_args, place: tuple, value) -> None:
    """Set the value at ``place`` in place; a tuple on the way is rebuilt in its mutable parent (the
    arguments themselves are replaced only in a list of them)."""
    parent = get(root_args, place[:-1])
    if isinstance(parent, tuple):
        items = list(parent)
        items[place[-1]] = value
        put(root_args, place[:-1], tuple(items) if type(parent) is tuple else type(parent)(*items))
    elif isinstance(parent, (list, dict)):
        parent[place[-1]] = value
    else:
        try:
            setattr(parent, place[-1], value)
        except AttributeError:  # a frozen dataclass or a read-only property: the object's own dict
            object.__setattr__(parent, place[-1], value)
