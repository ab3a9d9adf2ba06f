"""Trees of arrays: models, gradients and optimiser states are walked, never registered.

Arrays (numpy or CuPy) and Tensors are leaves; lists, tuples, dicts and objects with attributes
recurse; everything else is static configuration. An object with a ``trainable`` attribute (a tuple of
attribute names) exposes only those attributes as parameters; the others are still moved between
devices and saved, but never differentiated or optimised.
"""
from __future__ import annotations

import copy
import types
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from .backend import get_array_module, is_array
from .tensor import Tensor, unwrap

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


class _Expand(NamedTuple):
    """A node of a bottom-up walk: the nodes below it and how to combine their results."""

    children: list
    combine: Callable


def bottom_up(root: Any, visit: Callable) -> Any:
    """Evaluate a tree bottom-up without recursion, so depth is limited only by memory.

    ``visit(node)`` returns either a finished result or ``expand(children, combine)``: then each
    child is visited in order and ``combine(results)`` gives the node's result.

    >>> def total(x):
    ...     return expand(x, sum) if isinstance(x, list) else x
    >>> deep = 1
    >>> for _ in range(10_000):
    ...     deep = [deep, 1]
    >>> bottom_up(deep, total)
    10001
    """
    stack: list = []
    item = visit(root)
    while True:
        if type(item) is _Expand:
            stack.append((item, []))
        elif stack:
            stack[-1][1].append(item)
        else:
            return item
        while True:
            node, results = stack[-1]
            if len(results) < len(node.children):
                item = visit(node.children[len(results)])
                break
            stack.pop()
            value = node.combine(results)
            if not stack:
                return value
            stack[-1][1].append(value)


def expand(children: list, combine: Callable) -> _Expand:
    """The result of a `bottom_up` visit for a node with ``children``; see `bottom_up`."""
    return _Expand(list(children), combine)


def map_arrays(fn: Callable, tree: Any, trainable_only: bool = False,
               static: Callable | None = None) -> Any:
    """Rebuild ``tree`` with every leaf replaced by ``fn(leaf)``; a leaf seen twice maps once.

    Containers without leaves are returned as they are (not copied). When ``static`` is given, every
    value that is not a leaf and holds no leaf (numbers, strings, functions, containers of them)
    becomes ``static(value)``; gradients use it to put None where a model holds configuration.
    Each container is walked once, however often it is shared, and at any depth.

    >>> import minflux as mf, numpy as np
    >>> mf.tree.map_arrays(lambda a: a * 2, {"w": np.ones(2), "n": 3})
    {'w': array([2., 2.]), 'n': 3}
    >>> mf.tree.map_arrays(lambda a: a * 2, {"w": np.ones(2), "cfg": {"n": 3}}, static=lambda v: None)
    {'w': array([2., 2.]), 'cfg': None}
    """
    cls = tree.__class__
    if cls is np.ndarray:   # the common cases, as the walk below would map them
        return fn(tree)
    if cls is tuple and tree and all(x.__class__ is np.ndarray for x in tree):
        mapped: dict = {}
        for x in tree:
            if id(x) not in mapped:
                mapped[id(x)] = fn(x)
        out = tuple(mapped[id(x)] for x in tree)
        return tree if all(new is old for new, old in zip(out, tree)) else out
    memo: dict = {}  # id -> (object, its result, whether it holds a leaf); the object pins the id

    def visit(x):
        key = id(x)
        if key in memo:
            _, out, has_leaf = memo[key]
            return out, has_leaf
        if is_leaf(x):
            out = fn(x)
            memo[key] = (x, out, True)
            return out, True
        kids = children(x, trainable_only)
        if kids is None:
            return (x if static is None else static(x)), False
        memo[key] = (x, x, False)  # a reference cycle back to x sees x itself

        def combine(results):
            changed = {k: new for (k, child), (new, _) in zip(kids, results) if new is not child}
            has_leaf = any(h for _, h in results)
            if not has_leaf:
                out = x if static is None else static(x)
            else:
                out = rebuild(x, changed) if changed else x
            memo[key] = (x, out, has_leaf)
            return out, has_leaf

        return expand([child for _, child in kids], combine)

    return bottom_up(tree, visit)[0]


def named_leaves(tree: Any, trainable_only: bool = True, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted_name, leaf)`` for every distinct leaf, first occurrence wins (tied arrays once).

    Each container is walked once (a shared subtree is named by its first path), at any depth.

    >>> import minflux as mf, numpy as np
    >>> [name for name, _ in mf.tree.named_leaves({"layers": [{"W": np.ones(1)}]})]
    ['layers.0.W']
    """
    return walk_named(tree, prefix, is_leaf, lambda x: children(x, trainable_only))


def walk_named(root: Any, prefix: str, is_leaf: Callable, children_of: Callable) -> Iterator[tuple[str, Any]]:
    """``(dotted_name, leaf)`` for every distinct leaf below ``root``, depth first, without recursion.

    ``children_of(x)`` gives a container's ``(key, child)`` pairs, or None for a value that is neither
    leaf nor container. Each leaf and each container is visited once (a shared one by its first path).

    >>> list(walk_named({"a": [1, 2]}, "", lambda x: isinstance(x, int),
    ...                 lambda x: list(x.items()) if isinstance(x, dict) else list(enumerate(x))))
    [('a.0', 1), ('a.1', 2)]
    """
    seen: dict[int, Any] = {}  # id -> object, leaves and containers alike; the object pins the id
    stack = [iter([(prefix, root)])]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        path, x = item
        if id(x) in seen:
            continue
        if is_leaf(x):
            seen[id(x)] = x
            yield path, x
            continue
        kids = children_of(x)
        if kids is not None:
            seen[id(x)] = x
            stack.append(iter([((f"{path}.{k}" if path else str(k)), child) for k, child in kids]))


def leaves(tree: Any, trainable_only: bool = True) -> list:
    """The distinct leaves of ``tree`` in walk order.

    >>> import minflux as mf, numpy as np
    >>> w = np.ones(2); len(mf.tree.leaves([w, w, {"b": np.zeros(1)}]))
    2
    """
    return [leaf for _, leaf in named_leaves(tree, trainable_only)]


def map(fn: Callable, tree: Any, *others: Any, none_as_zero: bool = False) -> Any:
    """``fn`` applied leaf by leaf across trees of one structure: ``fn(a, b, ...)`` for the arrays at
    each position of ``tree`` and ``others``, giving a tree shaped like ``tree``.

    Gradient trees hold None where an array got no gradient. Where every tree holds None the
    result holds None; where only some do, that is an error naming the position, unless
    ``none_as_zero=True``, which passes zeros shaped like the array beside it. Configuration (numbers,
    functions) comes from the first tree that has it. Accumulating gradients is one line:

    >>> import numpy as np, minflux as mf
    >>> g1 = {"W": np.ones(2), "b": None, "act": None}
    >>> g2 = {"W": np.full(2, 3.0), "b": None, "act": None}
    >>> mf.tree.map(lambda a, b: a + b, g1, g2)
    {'W': array([4., 4.]), 'b': None, 'act': None}
    >>> mf.tree.map(lambda a, b: a + b, {"b": np.ones(1)}, {"b": None}, none_as_zero=True)
    {'b': array([1.])}
    """
    trees = (tree,) + others
    memo: dict = {}

    def visit(node):
        xs, path = node
        arrays = [x for x in xs if is_leaf(x)]
        if arrays:
            if len(arrays) != len(xs):
                bad = [k for k, x in enumerate(xs) if not is_leaf(x)]
                if not none_as_zero or any(xs[k] is not None for k in bad):
                    what = ", ".join(f"tree {k} holds {'None' if xs[k] is None else type(xs[k]).__name__}"
                                     for k in bad)
                    fix = " (pass none_as_zero=True to treat None as zeros)" if all(
                        xs[k] is None for k in bad) else ""
                    raise ValueError(f"mf.tree.map: at {path or '<root>'} some trees hold an array and "
                                     f"others not: {what}{fix}")
                xp_zeros = _zeros_like(arrays[0])
                xs = tuple(x if is_leaf(x) else xp_zeros for x in xs)
            key = tuple(id(x) for x in xs)
            if key not in memo:  # tied arrays map once and stay tied
                memo[key] = (xs, fn(*xs))
            return memo[key][1]
        template = next((x for x in xs if x is not None and children(x) is not None), None)
        if template is None:
            return next((x for x in xs if x is not None), None)
        ids = ("container",) + tuple(id(x) for x in xs)
        if ids in memo:  # a shared subtree is walked once; a cycle back to it sees the template
            return memo[ids][1]
        memo[ids] = (xs, template)
        kids = children(template)
        keys = [k for k, _ in kids]
        lookups = []
        for k, x in enumerate(xs):
            if x is None:
                lookups.append(None)
                continue
            theirs = children(x)
            if theirs is None or [key for key, _ in theirs] != keys:
                raise ValueError(f"mf.tree.map: at {path or '<root>'} tree {k} has a different structure "
                                 f"(keys {[key for key, _ in theirs] if theirs else type(x).__name__}, "
                                 f"expected {keys})")
            lookups.append(dict(theirs))
        below = [(tuple(None if d is None else d[key] for d in lookups),
                  f"{path}.{key}" if path else str(key)) for key, _ in kids]

        def combine(results):
            changed = {key: new for (key, child), new in zip(kids, results) if new is not child}
            out = rebuild(template, changed) if changed else template
            memo[ids] = (xs, out)
            return out

        return expand(below, combine)

    return bottom_up((trees, ""), visit)


def _zeros_like(array):

    value = unwrap(array)
    return get_array_module(value).zeros_like(value)
