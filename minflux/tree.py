"""Trees of arrays: models, gradients and optimiser states are walked, never registered.

Arrays (numpy or CuPy) and Tensors are leaves; lists, tuples, dicts and objects with attributes
recurse; everything else is static configuration. An object with a ``trainable`` attribute (a tuple of
attribute names) exposes only those attributes as parameters; the others are still moved between
devices and saved, but never differentiated or optimised.
"""
from __future__ import annotations

import copy
import types
from typing import Any, Callable, Iterator

import numpy as np

from .backend import is_array
from .tensor import Tensor

_STATIC = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, types.ModuleType, type,
           str, bytes, int, float, complex, bool, type(None), np.ufunc, np.dtype, np.generic)


def is_leaf(x: Any) -> bool:
    """True for arrays and Tensors, the leaves of a tree.

    >>> import minflux as mf, numpy as np
    >>> mf.tree.is_leaf(np.zeros(1)), mf.tree.is_leaf([np.zeros(1)])
    (True, False)
    """
    return is_array(x) or isinstance(x, Tensor)


def children(x: Any, trainable_only: bool = False) -> list[tuple[Any, Any]] | None:
    """The ``(key, child)`` pairs of a container, or None when ``x`` is a leaf or static.

    >>> import minflux as mf
    >>> mf.tree.children({"a": 1, "b": [2]})
    [('a', 1), ('b', [2])]
    """
    if isinstance(x, _STATIC) or is_leaf(x):
        return None
    if isinstance(x, (list, tuple)):
        return list(enumerate(x))
    if isinstance(x, dict):
        return list(x.items())
    attrs = getattr(x, "__dict__", None)
    if attrs is None:
        return None
    if trainable_only:
        names = getattr(x, "trainable", None)
        if names is not None and not callable(names):
            return [(k, v) for k, v in attrs.items() if k in names]
    return list(attrs.items())


def rebuild(x: Any, new_children: dict) -> Any:
    """A copy of container ``x`` with some children replaced (``new_children`` maps key to value).

    >>> rebuild((1, 2, 3), {1: "two"})
    (1, 'two', 3)
    """
    if isinstance(x, list):
        out = list(x)
        for k, v in new_children.items():
            out[k] = v
        return out
    if isinstance(x, tuple):
        items = list(x)
        for k, v in new_children.items():
            items[k] = v
        return type(x)(*items) if hasattr(x, "_fields") else type(x)(items)
    if isinstance(x, dict):
        out = copy.copy(x)
        out.update(new_children)
        return out
    out = copy.copy(x)
    if out is x:
        raise TypeError(f"cannot rebuild a {type(x).__name__}: copying it returns the same object, so "
                        "replacing its arrays would modify the original")
    for k, v in new_children.items():
        object.__setattr__(out, k, v)
    return out


def map_arrays(fn: Callable, tree: Any, trainable_only: bool = False,
               static: Callable | None = None) -> Any:
    """Rebuild ``tree`` with every leaf replaced by ``fn(leaf)``; a leaf seen twice maps once.

    Containers without leaves are returned as they are (not copied). When ``static`` is given, every
    value that is not a leaf and holds no leaf (numbers, strings, functions, containers of them)
    becomes ``static(value)``; gradients use it to put None where a model holds configuration.

    >>> import minflux as mf, numpy as np
    >>> mf.tree.map_arrays(lambda a: a * 2, {"w": np.ones(2), "n": 3})
    {'w': array([2., 2.]), 'n': 3}
    >>> mf.tree.map_arrays(lambda a: a * 2, {"w": np.ones(2), "cfg": {"n": 3}}, static=lambda v: None)
    {'w': array([2., 2.]), 'cfg': None}
    """
    return _map(fn, tree, trainable_only, {}, static)[0]


def _map(fn, tree, trainable_only, memo, static) -> tuple[Any, bool]:
    """`map_arrays`, also saying whether ``tree`` holds a leaf; ``memo`` maps id to (tree, out, has_leaf)."""
    key = id(tree)
    if key in memo:
        _, out, has_leaf = memo[key]
        return out, has_leaf
    if is_leaf(tree):
        out = fn(tree)
        memo[key] = (tree, out, True)
        return out, True
    kids = children(tree, trainable_only)
    if kids is None:
        return (tree if static is None else static(tree)), False
    memo[key] = (tree, tree, False)  # breaks reference cycles
    changed = {}
    has_leaf = False
    for k, child in kids:
        new, child_has_leaf = _map(fn, child, trainable_only, memo, static)
        has_leaf = has_leaf or child_has_leaf
        if new is not child:
            changed[k] = new
    if not has_leaf:
        out = tree if static is None else static(tree)
    else:
        out = rebuild(tree, changed) if changed else tree
    memo[key] = (tree, out, has_leaf)
    return out, has_leaf


def named_leaves(tree: Any, trainable_only: bool = True, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted_name, leaf)`` for every distinct leaf, first occurrence wins (tied arrays once).

    >>> import minflux as mf, numpy as np
    >>> [name for name, _ in mf.tree.named_leaves({"layers": [{"W": np.ones(1)}]})]
    ['layers.0.W']
    """
    seen: set[int] = set()

    def walk(x, path, visiting):
        if is_leaf(x):
            if id(x) not in seen:
                seen.add(id(x))
                yield path, x
            return
        kids = children(x, trainable_only)
        if kids is None or id(x) in visiting:
            return
        visiting = visiting | {id(x)}
        for k, child in kids:
            yield from walk(child, f"{path}.{k}" if path else str(k), visiting)

    yield from walk(tree, prefix, frozenset())


def leaves(tree: Any, trainable_only: bool = True) -> list:
    """The distinct leaves of ``tree`` in walk order.

    >>> import minflux as mf, numpy as np
    >>> w = np.ones(2); len(mf.tree.leaves([w, w, {"b": np.zeros(1)}]))
    2
    """
    return [leaf for _, leaf in named_leaves(tree, trainable_only)]
