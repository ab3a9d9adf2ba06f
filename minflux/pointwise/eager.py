"""Running one primitive of the derivative table now: its array implementation and, for tracked
arguments, its partials from the table, recorded as one broadcast node."""
from __future__ import annotations

import numpy as np

from ..autograd import active_tape
from ..backend import get_array_module
from ..compiler import TABLE, ArrayMath
from ..schedule import operation
from ..tensor import Tensor
from .node import broadcast_node

_MATH: dict = {}
_HOST_LOOPS = frozenset({"erf"})
"""Primitives whose array implementation loops over the elements in Python (libm's erf per element):
a recording keeps each call as one step, since it cannot follow that loop's reads."""


@operation(results="new")
def _host_loop(name: str, *args):
    return TABLE[name].impl(get_array_module(*args), *args)


class _Math(ArrayMath):
    """The namespace of derivative rules on arrays, with `_HOST_LOOPS` primitives as one step each."""

    def __getattr__(self, name):
        if name in _HOST_LOOPS:
            return lambda *args: _host_loop(name, *args)
        return ArrayMath.__getattr__(self, name)


def _math(xp) -> ArrayMath:
    m = _MATH.get(xp)
    if m is None:
        m = _MATH[xp] = _Math(xp)
    return m


def apply_primitive_now(name: str, *args, tape=None):
    """Run primitive ``name`` over ``args`` now: its array implementation and, when an argument is
    tracked on ``tape`` (the active tape when not given), the table's partials for it on the same
    arrays, recorded as one broadcast node.

    >>> import numpy as np
    >>> apply_primitive_now("tanh", np.zeros(2))
    array([0., 0.])
    """
    prim = TABLE[name]
    if len(args) != prim.arity:
        raise TypeError(f"mf.{name} takes {prim.arity} arguments, got {len(args)}")
    values = [a.value if isinstance(a, Tensor) else a for a in args]
    xp = get_array_module(*values, op=f"mf.{name}")
    try:
        y = _host_loop(name, *values) if name in _HOST_LOOPS else prim.impl(xp, *values)
    except ValueError as e:  # numpy's broadcast error lacks the op's name
        shapes = [tuple(np.shape(v)) for v in values]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise ValueError(f"mf.{name}: cannot broadcast shapes {' and '.join(map(str, shapes))}") from e
        raise
    if tape is None:
        tape = active_tape()
    rules = prim.partials
    partials = {}
    if tape is not None:
        m = None
        for k, a in enumerate(args):
            if isinstance(a, Tensor) and a._tape is tape and rules[k] is not None:
                if m is None:
                    m = _math(xp)
                partials[(0, k)] = _as_dtype(_partial(rules[k], m, values, y), y)
    if not partials:
        for a in args:
            if isinstance(a, Tensor):
                return Tensor(y)
        return y
    # arguments without a partial are recorded as constants, so the tape links y only to the inputs
    # it is differentiated by (`reverse` asks the tape which inputs an output reaches)
    linked = [a if (0, k) in partials else values[k] for k, a in enumerate(args)]
    return broadcast_node(name, linked, (y,), partials, values=values)


def _partial(rule, m, values: list, y):
    """``rule(m, *values, y)``; where it divides one Python number by another zero (``1 / b`` of
    ``x / 0.0``), as numpy does: with numpy scalars, giving inf or nan under numpy's error state."""
    try:
        return rule(m, *values, y)
    except ZeroDivisionError:
        return rule(m, *[_numpy_number(v) for v in values], y)


def _numpy_number(v):
    if v.__class__ is bool or v.__class__ is int or v.__class__ is float or v.__class__ is complex:
        return np.asarray(v)[()]
    return v


def _as_dtype(partial, y):
    """Indicator partials (``where(c, 1.0, 0.0)``) come out float64; keep float32 gradients float32."""
    if partial.__class__ is float or partial.__class__ is int:
        return partial
    dtype = getattr(partial, "dtype", None)
    if dtype is not None and dtype != y.dtype and y.dtype.kind == "f":
        return partial.astype(y.dtype)
    return partial
