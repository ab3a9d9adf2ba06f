"""The guard of a compiled function: what must be the same for a recorded schedule to be replayed.

`flatten` walks what a call reads -- its arguments, and the function itself with its free variables
(`minflux.compiled.free_variables`; an object whose class has ``guard_children`` names what of it is
read) -- in one pass, and returns the array (and generator) leaves, the positions where they sit, and
the *guard key*: the tree structure, each array's shape, dtype, device and strides (and which leaves
are one tied array), every number by its bits, every other static value, and the process settings a
recording depends on (`settings`: every recorded row of `minflux.runtime.settings`, fusion's
thresholds, the default dtype and numpy's error state). A replay is used only for an equal key, so it
never runs on anything it was not recorded for. What no key can hold -- an iterator, a foreign array,
an object whose contents cannot be walked, the clock or a global random state -- is named in
`Flat.refused`, and the call is not recorded: it raises or runs eagerly, as `mf.compile`'s
``fallback`` says.

>>> import numpy as np
>>> flat = flatten(({"w": np.zeros((2, 3)), "lr": 0.1},))
>>> len(flat.leaves), flat.places[0]
(1, [(0, 'w')])
>>> flatten(({"w": np.zeros((2, 3)), "lr": 0.2},)).key == flat.key
False
"""
from __future__ import annotations

import argparse
import array
import collections
import functools
import random
import struct
import types
from typing import NamedTuple

import numpy as np

from .. import tree
from ..backend import default_dtype, is_array, is_cupy_array
from ..pointwise.lazy import set_fusion
from ..runtime import settings as runtime_settings
from ..schedule.traced import Traced
from ..tensor import Tensor
from .free_variables import (Base, FreeName, Member, class_members, followed, impure_read, is_dunder,
                             is_library, is_user_module, members)

GENERATOR = "generator"
_PLAIN = frozenset({int, bool, str, bytes, type(None)})
_BITS = frozenset({float, complex})
_PLACE_KEYS = (FreeName, Member, Base)


def settings() -> tuple:
    """The process settings a recording depends on: every recorded row of `minflux.runtime.settings`,
    fusion's thresholds, the default dtype and numpy's error state."""
    return (runtime_settings.snapshot(), tuple(sorted(set_fusion().items())), default_dtype().str,
            tuple(sorted(np.geterr().items())))


class Flat(NamedTuple):
    """The walk of a call: unique array (and generator) ``leaves``, the positions of each
    (``places[k]``, several for a tied array), the guard ``key``, the positions of the other leaves
    (``values``, with their values), the positions of the mutable containers by id, ``free``: the
    free variables holding data, as ``(function, FreeName)``, and ``refused``: why the call cannot
    be recorded, or None."""

    leaves: list
    places: list
    key: tuple
    values: dict
    containers: dict
    free: list
    refused: str | None


def _bits(x) -> bytes:
    if isinstance(x, complex):
        return struct.pack("<dd", x.real, x.imag)
    return struct.pack("<d", x)


def flatten(roots: tuple) -> Flat:
    """Walk ``roots`` (the arguments, then the function; see `Flat` and the module docstring).
    Random generators are leaves: a replay draws from the generator it is given, as the function would."""
    leaves, places, key, free = [], [], [], []
    seen: dict[int, int] = {}
    walked: dict[int, int] = {}   # id of a mutable container, object or function -> its key entry
    values: dict = {}
    containers: dict = {}
    refused: list = []

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

    def array(x, place):
        device = "gpu" if is_cupy_array(x) else "cpu"
        leaf(x, place, ("array", x.shape, x.dtype.str, device, x.strides))

    def visit(x, place):
        cls = x.__class__
        if cls is np.ndarray:       # the common cases first, each as `tree.children` would see it
            leaf(x, place, ("array", x.shape, x.dtype.str, "cpu", x.strides))
            return
        if cls in _PLAIN:
            values[place] = x
            key.append(("value", cls, x))
            return
        if cls in _BITS:
            values[place] = x
            key.append(("value", cls, _bits(x)))
            return
        if cls is tuple:
            node(x, list(enumerate(x)), place)
            return
        if cls is list or cls is dict:
            if not shared(x, place):
                node(x, list(enumerate(x) if cls is list else x.items()), place)
            return
        route = _ROUTES.get(cls) or _route(x)
        if route is _TENSOR:
            visit(x.value, place)
        elif route is _ARRAY:
            array(x, place)
        elif route is _GENERATOR:
            containers.setdefault(id(x), place)   # returned, it is the caller's own generator
            leaf(x, place, (GENERATOR,))
        elif route is _GENERIC:
            values[place] = x
            key.append(("value", cls, x.tobytes()))
        elif route is _FUNCTION:
            function(x, place)
        elif route is _SPECIAL:
            if not shared(x, place):
                node(x, _special_children(x), place)
        elif route.__class__ is str:
            refused.append(f"{where(place, roots)} is {route}")
            key.append(("refused",))
        elif route is _OPAQUE:
            values[place] = x
            key.append(("value", _ByIdentity(x)))
        else:
            attributes = getattr(x, "__dict__", None) if route is not _OBJECT else None
            if attributes is None:
                walk_object(x, cls, place)
            elif not shared(x, place):
                kids = list(attributes.items())
                node(x, kids + [("__class__", cls)] if route is _USER_ATTRIBUTES else kids, place)

    def walk_object(x, cls, place):
        kids = tree.children(x)
        if kids is None:
            kids = _slots(x)
        if kids is None:
            try:
                hash(x)
            except TypeError:
                refused.append(f"{where(place, roots)} is a {cls.__name__}, which has no attributes to "
                               "walk and no value to key; pass what it holds as arrays or numbers")
                key.append(("refused",))
                return
            values[place] = x
            key.append(("value", (cls, x)))
            return
        if not shared(x, place):
            if not is_library(cls):
                kids = kids + [("__class__", cls)]
            node(x, kids, place)

    def shared(x, place) -> bool:
        first = walked.get(id(x))
        if first is not None:
            key.append(("same", first))
            return True
        walked[id(x)] = len(key)
        return False

    def function(fn, place):
        if not followed(fn):
            values[place] = fn
            key.append(("value", (types.FunctionType, fn)))
            return
        if shared(fn, place):
            return
        found = members(fn)
        why = impure_read(fn, found)
        if why:
            refused.append(why)
        for name, value in found:
            if not isinstance(value, (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType)):
                free.append((fn, name))
        kids = [("defaults", fn.__defaults__), ("kwdefaults", fn.__kwdefaults__)] + found
        key.append(("function", fn.__code__))
        for k, child in kids:
            visit(child, place + (k,))

    def node(x, kids, place):
        if not isinstance(x, tuple):
            containers.setdefault(id(x), place)
        key.append(("node", type(x), tuple([k for k, _ in kids])))
        for k, child in kids:
            visit(child, place + (k,))

    for i, a in enumerate(roots):
        visit(a, (i,))
    return Flat(leaves, places, (tuple(key), settings()), values, containers, free,
                refused[0] if refused else None)


_NAMESPACES = (types.SimpleNamespace, argparse.Namespace)

(_TENSOR, _ARRAY, _GENERATOR, _GENERIC, _FUNCTION, _SPECIAL, _OPAQUE, _OBJECT, _ATTRIBUTES,
 _USER_ATTRIBUTES) = (object() for _ in range(10))
_ROUTES: dict = {}
"""Class -> how `flatten` walks its objects (a route above, or why it refuses them), for every
class whose objects all go one way: not a class object (a class is walked by what it is), a module
(a user's is walked, a library's keyed by identity) nor a recording's stand-in of an array."""


def _route(x):
    """How `flatten` walks ``x``, an object not an array, a number or a built-in container."""
    if isinstance(x, Tensor):
        route = _TENSOR
    elif isinstance(x, np.ndarray) and x.__class__ is not np.ndarray:
        cls = x.__class__
        route = (f"a {cls.__module__}.{cls.__name__}, a subclass of numpy.ndarray whose operators a "
                 "recording does not follow (a matrix's * multiplies matrices; a masked array's operations "
                 "keep its mask); pass np.asarray(x)")
    elif is_array(x):
        route = _ARRAY
    elif isinstance(x, np.random.Generator):
        route = _GENERATOR
    elif isinstance(x, np.generic):
        route = _GENERIC
    elif isinstance(x, types.FunctionType):
        route = _FUNCTION
    elif _special_children(x) is not None:
        route = _SPECIAL
    else:
        route = _not_walkable(x) or (_OPAQUE if _opaque(x) else _OBJECT)
        if route is _OBJECT and not isinstance(x, (list, tuple, dict)) and tree.children(x) is not None:
            route = _ATTRIBUTES if is_library(x.__class__) else _USER_ATTRIBUTES   # walked by its __dict__
    if not isinstance(x, (type, Traced, types.ModuleType)):   # a class, a module: walked by what it is
        _ROUTES[x.__class__] = route
    return route


def _special_children(x):
    """What of ``x`` a guard walks where its class says (``guard_children``) or it is a class, a
    bound method, a partial, a set, a user's module, or one of the standard library's other containers;
    else None."""
    walk = getattr(type(x), "guard_children", None)
    if walk is not None:
        return walk(x)
    if isinstance(x, type):
        return None if is_library(x) else class_members(x)
    if isinstance(x, types.MethodType):
        return [("__self__", x.__self__), ("__func__", x.__func__)]
    if isinstance(x, functools.partial):
        return [("func", x.func), ("args", x.args), ("keywords", x.keywords)]
    if isinstance(x, set):
        return [("members", frozenset(x))]
    if is_user_module(x):   # reached otherwise than as a global its code names (in a closure, an argument)
        return [(name, value) for name, value in vars(x).items() if not is_dunder(name)]
    if isinstance(x, _SEQUENCES):
        return list(enumerate(x))
    if isinstance(x, _MAPPINGS):
        return list(x.items())
    return None


_SEQUENCES = (collections.deque, collections.UserList)
_MAPPINGS = (collections.ChainMap, collections.UserDict, types.MappingProxyType)
"""The standard library's containers besides the built-in ones, walked by their items as a list or
a dict is."""
_INDEXED = (list, tuple, dict, *_SEQUENCES, *_MAPPINGS)
"""The containers whose children a place reaches by indexing."""


class _ByIdentity:
    """An object in a guard key by identity (kept alive by the key, so its id is never reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return isinstance(other, _ByIdentity) and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)

    def __repr__(self):
        return f"{type(self.obj).__name__} object"


def _opaque(x) -> bool:
    """True for an object of the standard library or another library outside minflux and numpy (a
    logger, a lock, a progress bar): its insides are that library's, not the function's data, so it
    is keyed by identity and not walked. Containers and namespaces are walked."""
    if isinstance(x, (list, tuple, dict, set, frozenset) + _NAMESPACES):
        return False
    module = (type(x).__module__ or "").split(".", 1)[0]
    return module not in ("minflux", "numpy") and is_library(type(x))


def _slots(x) -> list | None:
    names = [n for klass in type(x).__mro__ for n in getattr(klass, "__slots__", ())
             if n not in ("__weakref__", "__dict__")]
    if not names:
        return None
    return [(n, getattr(x, n)) for n in names if hasattr(x, n)]


def _not_walkable(x) -> str | None:
    """Why ``x`` cannot be part of a guard key, or None."""
    cls = type(x)
    if hasattr(cls, "__next__"):
        return (f"an iterator ({cls.__name__}): its position cannot be keyed; draw the batch outside "
                "and pass the arrays")
    if isinstance(x, (np.random.RandomState, random.Random, np.random.BitGenerator, np.random.SeedSequence)):
        return f"a {cls.__name__}, whose draws a recording cannot follow; pass a np.random.Generator"
    if hasattr(cls, "__dlpack__") or hasattr(cls, "__array__") or hasattr(cls, "__cuda_array_interface__"):
        return (f"a {cls.__module__}.{cls.__name__} array; convert it first (np.asarray(x), or "
                "np.from_dlpack(x) for a GPU array)")
    if isinstance(x, (array.array, bytearray)):
        return (f"{'an array.array' if isinstance(x, array.array) else 'a bytearray'}, whose contents "
                "change without its identity and a recording does not key; pass np.asarray(x)")
    if cls.__module__ in ("queue", "multiprocessing.queues", "asyncio.queues"):
        return (f"a {cls.__module__}.{cls.__name__}: what the function takes from it cannot be keyed; "
                "take the batch outside and pass the arrays")
    return None


def where(place: tuple, roots) -> str:
    """A position in a call's walk (roots: the arguments, the keywords, the function), in words:
    ``argument 0's w`` or ``the global `rng` of f``.

    >>> def f(x): return x
    >>> where((0, "w", 1), [{"w": [0, 1]}, {}, f]), where((1, "lr"), [{}, {"lr": 0.1}, f])
    ("argument 0's w.1", 'the keyword argument lr')
    """
    x, rest = roots[place[0]], place[1:]
    if place[0] == len(roots) - 1:
        words = "the function"
    elif place[0] == len(roots) - 2 and rest:
        words, x, rest = f"the keyword argument {rest[0]}", x[rest[0]], rest[1:]
    else:
        words = f"argument {place[0]}"
    path = []
    for k in rest:
        if isinstance(k, FreeName):
            words, path = k.describe(x), []
        elif not isinstance(k, (Member, Base)):
            path.append(str(k))
        x = _child(x, k)
    return f"{words}'s {'.'.join(path)}" if path else words


def difference(old: tuple, new: tuple) -> str:
    """What changed between two guard keys, in words (for the warning about repeated recordings).

    >>> a = flatten((np.zeros(2), 1.0)).key
    >>> difference(a, flatten((np.zeros(3), 1.0)).key)
    'argument leaf 0 changed from array (2,) float64 to array (3,) float64'
    """
    if old[1] != new[1]:
        return "the process settings (minflux.runtime.settings, fusion or numpy's error state) changed"
    a, b = old[0], new[0]
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"argument leaf {i} changed from {_describe(x)} to {_describe(y)}"
    return "the structure of the arguments changed"


def _describe(entry: tuple) -> str:
    kind = entry[0]
    if kind == "array":
        layout = "" if entry[4] == np.empty(entry[1], np.dtype(entry[2])).strides else f" strides {entry[4]}"
        return f"array {entry[1]} {np.dtype(entry[2])}{layout}"
    if kind == "value":
        if len(entry) == 3:
            value = {float: lambda b: struct.unpack("<d", b)[0],
                     complex: lambda b: complex(*struct.unpack("<dd", b))}.get(entry[1], lambda b: b)(entry[2])
            return f"the value {value!r}"
        static = entry[1]
        return f"the {static!r}" if isinstance(static, _ByIdentity) else f"the value {static[1]!r}"
    if kind == "node":
        return f"a {entry[1].__name__} with keys {list(entry[2])}"
    if kind == "function":
        return f"the function {entry[1].co_name}"
    return kind


def get(root_args: tuple, place: tuple):
    """The value at ``place`` under the argument tuple."""
    x = root_args
    for k in place:
        x = _child(x, k)
    return x


def _child(x, k):
    cls = x.__class__
    if cls is list or cls is tuple or cls is dict or isinstance(x, _INDEXED):
        return x[k]
    if isinstance(k, _PLACE_KEYS):
        return k.read(x)
    return getattr(x, k)


def put(root_args, place: tuple, value) -> None:
    """Set the value at ``place`` in place; a tuple on the way is rebuilt in its mutable parent (the
    arguments themselves are replaced only in a list of them)."""
    put_into(root_args, place[:-1], [(place[-1], value)])


def put_into(root_args, at: tuple, items: list) -> None:
    """Set each ``(key, value)`` of ``items`` in the container or object at place ``at``, in place; a
    tuple there is rebuilt once, in its mutable parent.

    >>> args = [{"state": (1, 2, 3)}]
    >>> put_into(args, (0, "state"), [(0, 10), (2, 30)]); args
    [{'state': (10, 2, 30)}]
    """
    parent = get(root_args, at)
    if isinstance(parent, tuple):
        rebuilt = list(parent)
        for key, value in items:
            rebuilt[key] = value
        put(root_args, at, tuple(rebuilt) if type(parent) is tuple else type(parent)(*rebuilt))
        return
    for key, value in items:
        if isinstance(parent, _INDEXED):   # not a tuple: rebuilt above
            parent[key] = value
        elif isinstance(key, FreeName):
            key.write(parent, value)
        else:
            try:
                setattr(parent, key, value)
            except AttributeError:  # a frozen dataclass or a read-only property: the object's own dict
                object.__setattr__(parent, key, value)


def write_plan(places: list) -> list:
    """For the places of each value written back (a list of places per value; arrays and numbers,
    never a container, whose replacement a recording refuses): (the place of a parent, [(its key, the
    value's index)]) in order, so that the values written into one tuple rebuild it once (`put_planned`).

    >>> write_plan([[(0, "state", 0)], [(0, "state", 2)]])
    [((0, 'state'), [(0, 0), (2, 1)])]
    """
    into: dict = {}
    for i, of_value in enumerate(places):
        for place in of_value:
            into.setdefault(place[:-1], []).append((place[-1], i))
    return list(into.items())


def put_planned(root_args, plan: list, values: list) -> None:
    """`put_into` each parent of ``plan`` (`write_plan`) its ``values``.

    >>> args = [{"state": (1, 2, 3)}]
    >>> put_planned(args, write_plan([[(0, "state", 0)], [(0, "state", 2)]]), [10, 30]); args
    [{'state': (10, 2, 30)}]
    """
    for at, items in plan:
        put_into(root_args, at, [(key, values[i]) for key, i in items])
