"""Finding a scalar function's source (def or lambda, in a file, a doctest or registered exec code)
and resolving its free names the way Python would.

>>> import math
>>> resolve_free_name(lambda x: math.pi * x, "math") is math
True
"""
from __future__ import annotations

import ast
import struct
import builtins
import inspect
import linecache
import textwrap
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .errors import CompileError

_MISSING = object()


def resolve_free_name(fn: Callable, name: str):
    """Look ``name`` up the way ``fn`` would: its closure, then its globals, then builtins."""
    code = fn.__code__
    if name in code.co_freevars and fn.__closure__ is not None:
        cell = fn.__closure__[code.co_freevars.index(name)]
        try:
            return cell.cell_contents
        except ValueError:
            raise NameError(name) from None
    value = fn.__globals__.get(name, _MISSING)
    if value is _MISSING:
        value = getattr(builtins, name, _MISSING)
    if value is _MISSING:
        raise NameError(name)
    return value


def source_node(fn: Callable):
    """The ast node (FunctionDef or Lambda) of ``fn`` and its file name."""
    code = fn.__code__
    filename = code.co_filename
    lines = linecache.getlines(filename, fn.__globals__)
    text = "".join(lines)
    tree = None
    if text:
        try:
            tree = ast.parse(text)
        except SyntaxError:
            tree = None
    offset = 0
    if tree is None:
        try:
            source, start = inspect.getsourcelines(fn)
        except (OSError, TypeError):
            raise _unavailable(fn, filename) from None
        text = textwrap.dedent("".join(source))
        offset = start - 1
        try:
            tree = ast.parse(text)
        except SyntaxError:
            raise CompileError(f"the source of {fn.__qualname__} cannot be parsed on its own; define "
                               "it with def at module level", (filename, start), "source") from None
    first = code.co_firstlineno - offset
    candidates = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            starts = [node.lineno] + [d.lineno for d in node.decorator_list]
            if first in starts and node.name == code.co_name:
                candidates.append(node)
        elif isinstance(node, ast.Lambda) and code.co_name == "<lambda>" and node.lineno == first:
            names = [a.arg for a in node.args.args]
            if names == list(code.co_varnames[:code.co_argcount]):
                candidates.append(node)
    if len(candidates) > 1 and code.co_name == "<lambda>":
        # several lambdas with these parameters start on this line: take the smallest one that
        # spans every source position of the code object
        positions = [p for p in code.co_positions()
                     if p[2] is not None and p[3] is not None and p[3] > p[2] and p[0] == code.co_firstlineno]
        if positions:
            lo, hi = min(p[2] for p in positions), max(p[3] for p in positions)
            inside = [n for n in candidates if n.col_offset <= lo and hi <= (n.end_col_offset or 1 << 30)
                      and n.end_lineno == n.lineno]
            inside.sort(key=lambda n: n.end_col_offset - n.col_offset)
            candidates = inside[:1] or candidates
    if not candidates and filename.startswith("<"):   # text of other code under the same pseudo-name
        raise _unavailable(fn, filename)               # (Python 3.13 keeps ``python -c``'s as <string>)
    if not candidates:
        raise CompileError(f"cannot find the source of {fn.__qualname__}; define it with def in a file",
                           (filename, code.co_firstlineno), "source")
    return candidates[-1] if code.co_name != "<lambda>" else candidates[0], filename, offset


def _unavailable(fn: Callable, filename: str) -> CompileError:
    return CompileError(
        f"the source of {fn.__qualname__} is not available (file {filename!r}); the compiler reads a "
        "scalar function's source, so define it in a file, or give exec'd code a name and register "
        "its text: compile(src, name, 'exec') after linecache.cache[name] = (len(src), None, "
        "src.splitlines(True), name)", None, "source")


@dataclass
class Binding:
    """A free name of the scalar function resolved at compile time: ``(owner function, name, value)``.

    The compiled kernel stays valid while every binding resolves to the same value (numbers by type
    and value, floats by their bits, other objects by identity).
    """

    fn: Callable
    name: str
    value: Any
    root: bool = True   # a free name of the compiled function itself (not of an inlined callee)

    def still_valid(self, fn: Callable | None = None) -> bool:
        """True when the name still resolves to the recorded value (in ``fn`` for a root binding:
        another closure of the same code may hold other constants)."""
        owner = fn if (fn is not None and self.root) else self.fn
        try:
            now = resolve_free_name(owner, self.name)
        except NameError:
            return False
        if isinstance(self.value, float):    # by its bits: 0.0 and -0.0 are two constants, NaN one
            return type(now) is float and struct.pack("<d", now) == struct.pack("<d", self.value)
        if isinstance(self.value, (bool, int)):
            return type(now) is type(self.value) and now == self.value
        return now is self.value


def global_names(code) -> list:
    """The names ``code`` (and the code nested in it) may read as globals, in order.

    >>> global_names((lambda m, x, y: m.where(x < LIMIT, 1.0, 0.0)).__code__)
    ['where', 'LIMIT']
    """
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names += global_names(const)
    return names


def free_name_bindings(fn) -> list:
    """A `Binding` (not a root one) for each free name ``fn``'s code reads: its closure cells and the
    globals or builtins its names resolve to (attribute names resolve to nothing and are skipped).

    >>> LIMIT = 0.5
    >>> [(b.name, b.value) for b in free_name_bindings(lambda m, x, y: m.where(x < LIMIT, 1.0, 0.0))]
    [('LIMIT', 0.5)]
    """
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    found = []
    for name in (*code.co_freevars, *global_names(code)):
        try:
            found.append(Binding(fn, name, resolve_free_name(fn, name), root=False))
        except NameError:
            continue
    return found


def as_constant(value):
    """A Python number for a free name's value (numpy scalars included), or None when it is not one.

    >>> as_constant(np.float32(0.5)), as_constant("a")
    (0.5, None)
    """
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, (np.integer, np.floating, np.bool_)) and np.ndim(value) == 0:
        return value.item()
    return None


def assigned_locals(node) -> set:
    """The names a function's body (or a lambda's expression) assigns: its local variables."""
    names: set = set()
    body = node.body if isinstance(node.body, list) else [node.body]
    for stmt in body:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                names.add(sub.id)
    return names
