"""Module: an optional base class for layers; parameters are found by walking attributes.

Any object works as a layer: arrays among its attributes are its parameters, modules, lists, tuples
and dicts recurse, everything else is configuration. ``Module`` only adds conveniences on top of that
walk: dotted parameter names, a parameter count and a readable ``repr``. Set ``trainable`` (a tuple
of attribute names) to make only those attributes parameters; the others are still saved and moved
between devices but never differentiated or optimised.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..tree import children, is_leaf, named_leaves

__all__ = ["Module", "named_parameters", "parameter_count", "summary"]


def named_parameters(model: Any) -> list[tuple[str, Any]]:
    """``(dotted_name, array)`` for every distinct trainable array of any model (tied arrays once).

    >>> import numpy as np
    >>> from minflux.nn import named_parameters
    >>> class Affine:
    ...     def __init__(self):
    ...         self.W, self.b = np.ones((2, 3)), np.zeros(3)
    >>> [(name, a.shape) for name, a in named_parameters([Affine()])]
    [('0.W', (2, 3)), ('0.b', (3,))]
    """
    return [(name, leaf) for name, leaf in named_leaves(model, trainable_only=True)
            if np.dtype(leaf.dtype).kind in "fc"]


def parameter_count(model: Any) -> int:
    """The number of scalars in the distinct trainable arrays of ``model``.

    >>> import numpy as np
    >>> from minflux.nn import parameter_count
    >>> w = np.ones((2, 3))
    >>> parameter_count({"a": w, "tied": w, "b": np.zeros(3)})
    9
    """
    return int(sum(int(a.size) for _, a in named_parameters(model)))


def _shape_text(a) -> str:
    return f"{np.dtype(a.dtype).name}[{', '.join(str(n) for n in a.shape)}]"


def _count_text(n_params: int, n_fixed: int) -> str:
    text = f"{n_params:,} parameters"
    return text + (f", {n_fixed:,} non-trainable" if n_fixed else "")


def _counts(obj) -> tuple[int, int]:
    trainable = {id(a) for _, a in named_parameters(obj)}
    fixed = 0
    total = 0
    for _, a in named_leaves(obj, trainable_only=False):
        if id(a) in trainable:
            total += int(a.size)
        else:
            fixed += int(a.size)
    return total, fixed


def _is_object(x) -> bool:
    return children(x) is not None and not isinstance(x, (list, tuple, dict))


def _is_layer(x) -> bool:
    return isinstance(x, Module) or callable(getattr(x, "_repr_head", None))


def _has_leaves(x) -> bool:
    return next(iter(named_leaves(x, trainable_only=False)), None) is not None


def _is_compact(x) -> bool:
    """An object whose parameters are its own arrays (no sub-objects holding arrays)."""
    for _, child in children(x) or ():
        if is_leaf(child):
            continue
        if _has_leaves(child):
            return False
    return True


def _head(x) -> str:
    custom = getattr(x, "_repr_head", None)
    if callable(custom):
        return custom()
    trainable = {id(a) for _, a in named_parameters(x)}
    parts = [f"{k}: {_shape_text(v)}{'' if id(v) in trainable else ' (not trainable)'}"
             for k, v in children(x) or () if is_leaf(v)]
    return f"{type(x).__name__}({', '.join(parts)})"


def _lines(x, path: str, depth: int, out: list, seen: set, trainable: set) -> None:
    pad = "  " * depth
    for key, child in children(x) or ():
        name = f"{path}.{key}" if path else str(key)
        if is_leaf(child):
            fixed = "" if id(child) in trainable else "  (not trainable)"
            out.append((f"{pad}{name}: {_shape_text(child)}{fixed}", None))
        elif id(child) in seen:
            continue
        elif not _has_leaves(child):
            if _is_layer(child):  # parameter-free layers (Dropout, Identity) are part of the model too
                seen.add(id(child))
                out.append((f"{pad}{name} = {_head(child)}", None))
            continue
        elif isinstance(child, (list, tuple, dict)):
            _lines(child, name, depth, out, seen, trainable)
        elif _is_compact(child):
            seen.add(id(child))
            out.append((f"{pad}{name} = {_head(child)}", _counts(child)))
        else:
            seen.add(id(child))
            out.append((f"{pad}{name} = {type(child).__name__}(", _counts(child)))
            _lines(child, "", depth + 1, out, seen, trainable)
            out.append((f"{pad})", None))


def summary(model: Any) -> str:
    """A readable tree of a model: each layer, the shapes of its arrays and its parameter count.

    >>> import numpy as np
    >>> from minflux.nn import summary
    >>> class Affine:
    ...     def __init__(self):
    ...         self.W, self.b = np.ones((2, 3), np.float32), np.zeros(3, np.float32)
    >>> print(summary(Affine()))
    Affine(W: float32[2, 3], b: float32[3])  # 9 parameters
    """
    total = _counts(model)
    if not _is_object(model) or _is_compact(model):
        return f"{_head(model)}  # {_count_text(*total)}"
    body: list = []
    trainable = {id(a) for _, a in named_parameters(model)}
    _lines(model, "", 1, body, {id(model)}, trainable)
    rows = [(f"{type(model).__name__}(", total)] + body + [(")", None)]
    width = max(len(text) for text, _ in rows)
    return "\n".join(text if counts is None else f"{text.ljust(width)}  # {_count_text(*counts)}"
                     for text, counts in rows)


class Module:
    """Optional base class: ``named_parameters()``, ``parameter_count()`` and a readable ``repr``.

    Subclasses need no registration and no ``super().__init__()``: assign arrays and sub-layers as
    attributes. ``trainable = ("W",)`` (class or instance attribute) restricts the parameters.

    >>> import numpy as np, minflux as mf
    >>> class Scale(mf.nn.Module):
    ...     def __init__(self, n):
    ...         self.s = np.ones(n, np.float32)
    ...     def __call__(self, x):
    ...         return x * self.s
    >>> Scale(3)
    Scale(s: float32[3])  # 3 parameters
    >>> Scale(3).named_parameters()[0][0]
    's'
    """

    trainable: tuple[str, ...] | None = None

    def named_parameters(self) -> list[tuple[str, Any]]:
        """``(dotted_name, array)`` for every distinct trainable float array, e.g. ``layers.0.W``."""
        return named_parameters(self)

    def parameters(self) -> list:
        """The distinct trainable arrays in walk order."""
        return [a for _, a in named_parameters(self)]

    def parameter_count(self) -> int:
        """The number of trainable scalars (tied arrays counted once)."""
        return parameter_count(self)

    def __repr__(self) -> str:
        return summary(self)
