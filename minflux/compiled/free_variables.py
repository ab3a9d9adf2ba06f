"""What a function reads besides its arguments, as the guard walks it.

A compiled function's result depends on its closure cells, on the module globals its code loads or
stores (the code of the functions and lambdas defined inside it included; an attribute of the same
name is no global) and the attributes it names of a user module among them (``config.lr``), and on
the same of the user functions, classes (their methods and class attributes) and methods those lead
to. `members` lists them as ``(FreeName, value)`` pairs for the guard to walk like arguments: a
number there is keyed by its bits, an array becomes an input of the recording, a function is followed
in turn. Library code (minflux, numpy and the other packages below, the standard library) is not
followed: its globals are the library's own.

`impure_read` finds what no key can hold: the clock, Python's and numpy's global random state, the
environment (through a global or an import inside the function), a Generator made inside the
function, a file read. Those are refused at the recording.

>>> scale = 2.0
>>> def f(x):
...     return x * scale
>>> [(name.name, value) for name, value in members(f)]
[('scale', 2.0)]
"""
from __future__ import annotations

import dis
import functools
import os
import random
import sys
import types
from typing import Any, NamedTuple

import numpy as np

from ..compiler import global_names
from ..schedule.operation import operation

_LIBRARIES = frozenset({"minflux", "numpy", "numba", "llvmlite", "cupy", "scipy", "h5py", "tqdm",
                        "threadpoolctl", "mkl", "mpi4py", "torch", "jax", "jaxlib", "_pytest", "pytest",
                        "pluggy", "builtins"}) | frozenset(sys.stdlib_module_names)
_OPERATION_CODE = operation(lambda: None).__code__
"""The wrapper `mf.operation` puts around a function: its body runs again at every replay, on the
real arrays, so what it reads is never frozen and is not followed."""

_IMPURE_MODULES = {"time": "reads the clock", "datetime": "reads the clock", "random":
                   "draws from Python's global random state", "secrets": "draws from the system's "
                   "random source", "uuid": "makes a random identifier"}
_OS_IMPURE = frozenset({"environ", "getenv", "environb", "getenvb", "urandom", "getrandom", "times"})
_WARNING_FILTERS = frozenset({"catch_warnings", "simplefilter", "filterwarnings", "resetwarnings"})
_CHANGES_FILTERS = ("changes Python's warning filters, which a replay does not repeat (numpy's own warnings "
                    "follow np.errstate, which it does: use that)")
_GENERATOR_CLASSES = frozenset({"Generator", "BitGenerator", "SeedSequence", "PCG64", "PCG64DXSM",
                                "MT19937", "Philox", "SFC64"})
_NUMPY_GLOBAL_RANDOM = frozenset(set(np.random.__all__) - _GENERATOR_CLASSES)
"""numpy.random's functions of its global state, and the constructors of Generators seeded by it."""


class FreeName(NamedTuple):
    """The place of one free variable: ``kind`` is ``"cell"`` (the closure's cell ``index``),
    ``"global"`` (the function's module globals) or ``"module"`` (``attribute`` of the user module
    global ``name`` is bound to: ``config.lr``), ``name`` the name the code uses."""

    kind: str
    name: str
    index: int = -1
    attribute: str = ""

    def read(self, fn):
        if self.kind == "cell":
            return fn.__closure__[self.index].cell_contents
        if self.kind == "module":
            return getattr(fn.__globals__[self.name], self.attribute)
        return fn.__globals__[self.name]

    def write(self, fn, value) -> None:
        if self.kind == "cell":
            fn.__closure__[self.index].cell_contents = value
        elif self.kind == "module":
            setattr(fn.__globals__[self.name], self.attribute, value)
        else:
            fn.__globals__[self.name] = value

    def describe(self, fn) -> str:
        qualname = getattr(fn, "__qualname__", "the function")
        if self.kind == "module":
            return f"the module attribute `{self.name}.{self.attribute}` read by {qualname}"
        what = "closure variable" if self.kind == "cell" else "global"
        return f"the {what} `{self.name}` of {qualname}"


class Member(NamedTuple):
    """The place of a function defined in a class: ``name`` in the class's own namespace."""

    name: str

    def read(self, cls):
        return _function_of(cls.__dict__[self.name])


class Base(NamedTuple):
    """The place of a class's ``index``-th base class."""

    index: int

    def read(self, cls):
        return cls.__bases__[self.index]


def is_library(obj: Any) -> bool:
    """True for objects of minflux, numpy, the standard library and the other packages not followed.

    >>> import math
    >>> is_library(math.exp), is_library(is_library), is_library(eval("lambda: 0", {"__name__": "experiment"}))
    (True, True, False)
    """
    module = getattr(obj, "__module__", None)
    if module is None and isinstance(obj, types.FunctionType):
        module = obj.__globals__.get("__name__")
    if not isinstance(module, str):
        return True
    return module.split(".", 1)[0] in _LIBRARIES


def followed(fn: Any) -> bool:
    """True for a function whose free variables the guard walks: user code, not an operation.

    >>> followed(abs), followed(eval("lambda x: x", {"__name__": "experiment"}))
    (False, True)
    """
    return isinstance(fn, types.FunctionType) and not is_library(fn) and fn.__code__ is not _OPERATION_CODE


@functools.lru_cache(maxsize=4096)
def _names(code: types.CodeType) -> frozenset:
    """Every global or attribute name the code (and the code nested in it) mentions."""
    return frozenset(global_names(code))


@functools.lru_cache(maxsize=4096)
def _names_in_order(code: types.CodeType) -> tuple:
    return tuple(sorted(_names(code)))


@functools.lru_cache(maxsize=4096)
def _globals_in_order(code: types.CodeType) -> tuple:
    """The names the code (and the code nested in it) reads or writes as globals, not as attributes:
    ``rng.random()`` reads no global ``random``."""
    return tuple(sorted({name for op, name in _instructions(code)
                         if op and ("GLOBAL" in op or op.endswith("_NAME") and op != "IMPORT_NAME")}))


def members(fn: types.FunctionType) -> list:
    """``(FreeName, value)`` for each closure cell and named global of ``fn`` (see the module docstring)."""
    out = []
    closure = fn.__closure__ or ()
    for index, (name, cell) in enumerate(zip(fn.__code__.co_freevars, closure)):
        try:
            out.append((FreeName("cell", name, index), cell.cell_contents))
        except ValueError:       # a cell not yet filled (a function defined before its variable)
            continue
    module_globals = fn.__globals__
    for name in _globals_in_order(fn.__code__):
        if name in module_globals:
            value = module_globals[name]
            if not is_user_module(value):
                out.append((FreeName("global", name), value))
                continue
            out += [(FreeName("module", name, -1, attribute), getattr(value, attribute))   # config.lr
                    for attribute in _attribute_names(fn.__code__) if attribute in vars(value)
                    and not is_dunder(attribute)]
    return out


@functools.lru_cache(maxsize=4096)
def _attribute_names(code: types.CodeType) -> tuple:
    """The names the code (and the code nested in it) may read as attributes, sorted: those it names,
    and its string constants that could be one (``getattr(config, "lr")``)."""
    strings = {c for c in code.co_consts if isinstance(c, str) and c.isidentifier()}
    nested = (_attribute_names(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return tuple(sorted(strings.union(_names(code), *nested)))


def is_user_module(value) -> bool:
    """Whether ``value`` is a module of the user's (not of a library `followed` skips): its attributes
    are data a function may read.

    >>> import math, types
    >>> is_user_module(math), is_user_module(types.ModuleType("experiment_config"))
    (False, True)
    """
    return isinstance(value, types.ModuleType) and value.__name__.split(".", 1)[0] not in _LIBRARIES


def is_dunder(name: str) -> bool:
    """Whether ``name`` is Python's own (``__module__``, ``__dict__``...), not data of a class or module.

    >>> is_dunder("__doc__"), is_dunder("_scale")
    (True, False)
    """
    return name.startswith("__") and name.endswith("__")


def class_members(cls: type) -> list:
    """``(Member, function)`` for each function defined in ``cls``, ``(name, value)`` for each other
    attribute of its own namespace but the dunder ones (a class attribute its code may read through
    the class or an instance: ``self.scale``), and ``(Base, base)`` for each user class it derives
    from directly.

    >>> Layer = type("Layer", (), {"__module__": "experiment", "__call__": lambda self, x: x * 2, "scale": 2})
    >>> [getattr(key, "name", key) for key, _ in class_members(Layer)]
    ['__call__', 'scale']
    """
    out = []
    for name, value in vars(cls).items():
        fn = _function_of(value)
        if fn is not None:
            out.append((Member(name), fn))
        elif not is_dunder(name):
            out.append((name, value))
    out += [(Base(i), base) for i, base in enumerate(cls.__bases__) if not is_library(base)]
    return out


def _function_of(value):
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    elif isinstance(value, property):
        value = value.fget
    return value if isinstance(value, types.FunctionType) else None


def impure_read(fn: types.FunctionType, values: list) -> str | None:
    """What ``fn`` reads that no guard key can hold, in words, or None.

    >>> import time
    >>> def stamp(x):
    ...     return x * time.time()
    >>> impure_read(stamp, members(stamp))
    'reads the clock (`time` in stamp)'
    """
    for name, why in _file_reads(fn.__code__):
        if name not in fn.__globals__:   # the builtin, or a path's method
            return f"{why} (`{name}` in {fn.__qualname__})"
    names = _names(fn.__code__)
    for module, why in _imports(fn.__code__):
        why = why or _impure_module(module, names)
        if why:
            return f"{why} (`import {module}` in {fn.__qualname__})"
    for place, value in values:
        if place.kind != "global":
            continue
        if isinstance(value, types.ModuleType) and value.__name__ == "numpy":
            why = _numpy_impure(fn.__code__, place.name)
        else:
            why = _impure_value(value, names)
        if why:
            return f"{why} (`{place.name}` in {fn.__qualname__})"
    return None


@functools.lru_cache(maxsize=4096)
def _instructions(code: types.CodeType) -> tuple:
    """(operation, argument) of every instruction of ``code`` and of the code nested in it (a
    ``(None, None)`` between two code objects)."""
    steps = tuple((i.opname, i.argval) for i in dis.get_instructions(code))
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            steps += ((None, None),) + _instructions(const)
    return steps


_NUMPY_FILE_READERS = frozenset({"load", "loadtxt", "genfromtxt", "fromfile", "fromregex", "memmap"})
_READS_A_FILE = "reads a file; read it outside and pass what it holds"


@functools.lru_cache(maxsize=4096)
def _file_reads(code: types.CodeType) -> tuple:
    """(name, why) of each read ``code`` makes of a file or of standard input: the builtins ``open``
    and ``input`` (unless a global of that name shadows them) and a path's ``read_text`` or ``read_bytes``."""
    found = []
    for op, name in _instructions(code):
        if op == "LOAD_GLOBAL" and name in ("open", "input"):
            found.append((name, _READS_A_FILE if name == "open" else "reads standard input"))
        elif op in ("LOAD_ATTR", "LOAD_METHOD") and name in ("read_text", "read_bytes"):
            found.append((name, _READS_A_FILE))
    return tuple(found)


@functools.lru_cache(maxsize=4096)
def _numpy_impure(code: types.CodeType, numpy_name: str) -> str | None:
    """Why ``code`` (or the code nested in it), with global ``numpy_name`` bound to numpy, may draw
    from numpy's global random state or make a Generator (it reads ``numpy_name.random``:
    ``np.random.normal``, ``np.random.default_rng``, ``np.random`` itself; ``rng.random()`` of a
    Generator is an attribute of another object, no such read), or read a file (``np.load``)."""
    steps = _instructions(code)
    for k, (op, name) in enumerate(steps[:-1]):
        if op == "LOAD_GLOBAL" and name == numpy_name:
            then = steps[k + 1]
            if then == ("LOAD_ATTR", "random"):
                return _NUMPY_RANDOM
            if then[0] in ("LOAD_ATTR", "LOAD_METHOD") and then[1] in _NUMPY_FILE_READERS:
                return _READS_A_FILE
    return None


@functools.lru_cache(maxsize=4096)
def _imports(code: types.CodeType) -> tuple:
    """(module, why or None) for each import the code (or the code nested in it) makes as it runs:
    ``import time`` inside the function reads the clock as a global ``time`` would; importing
    ``random`` from numpy is its global random state."""
    found, steps = [], _instructions(code)
    for k, (op, name) in enumerate(steps):
        if op == "IMPORT_NAME":
            taken = steps[k + 1] if k + 1 < len(steps) else (None, None)
            if name == "numpy" and taken == ("IMPORT_FROM", "random"):
                found.append(("numpy.random", _NUMPY_RANDOM))
            else:
                found.append((name, None))
    return tuple(found)


def _impure_module(name: str, names: frozenset) -> str | None:
    """What reading module ``name`` (its attributes among ``names``) reads that no key can hold, or None."""
    top = name.split(".", 1)[0]
    if top in _IMPURE_MODULES:
        return _IMPURE_MODULES[top]
    if top in ("os", "posix") and names & _OS_IMPURE:
        return "reads the environment or the system's random source"
    if name.startswith("numpy.random") and names & _NUMPY_GLOBAL_RANDOM:
        return _NUMPY_RANDOM
    if top == "warnings" and names & _WARNING_FILTERS:
        return _CHANGES_FILTERS
    return None


_NUMPY_RANDOM = ("draws from numpy's global random state or makes a Generator inside the function "
                 "(pass a np.random.Generator as an argument)")


def _impure_value(value, names: frozenset) -> str | None:
    if isinstance(value, types.ModuleType):
        return _impure_module(value.__name__, names)
    if isinstance(getattr(value, "__self__", None), (np.random.RandomState, random.Random)):
        return "draws from a global random state"
    module = getattr(value, "__module__", None) or ""
    if callable(value) and module.split(".", 1)[0] in _IMPURE_MODULES:
        return _IMPURE_MODULES[module.split(".", 1)[0]]
    if callable(value) and module == "warnings" and getattr(value, "__name__", "") in _WARNING_FILTERS:
        return _CHANGES_FILTERS
    if callable(value) and module.startswith("numpy.random") and getattr(value, "__name__", "") == "default_rng":
        return "makes a Generator inside the function (pass a np.random.Generator as an argument)"
    if value is os.environ or (callable(value) and getattr(value, "__name__", "") in ("getenv", "urandom")
                               and module in ("os", "posix")):
        return "reads the environment or the system's random source"
    return None
