"""The cost model that picks the AD mode of a kernel: forward-mode duals or the element-local adjoint.

Both modes read the same inputs and write the same outputs (values and the partials the tape
asks for), so they move the same memory; what differs is the arithmetic per element. The model
counts it on the code each mode would run: the transformed IR after if-conversion (what the CPU
backend compiles), each call weighted by its rough cost in vector instructions. Duals win on
sparse or narrow functions (a partial that is a known constant costs nothing, a value that
depends on one input carries one partial); the adjoint wins when many inputs meet in a few
outputs (an ``N``-way product costs ``N^2`` dual updates but ``O(N)`` adjoint ones).

>>> from minflux.compiler.frontend import parse
>>> from minflux.compiler.kinds import infer_kinds
>>> from minflux.compiler.dual import differentiate
>>> from minflux.compiler.adjoint import adjoint
>>> def prod(a, b, c, d):
...     return a * b * c * d
>>> fn = infer_kinds(parse(prod).function, ["f"] * 4)
>>> operation_cost(adjoint(fn, [0, 1, 2, 3])) < operation_cost(differentiate(fn, [0, 1, 2, 3]))
True
"""
from __future__ import annotations

from .ifconvert import if_convert
from .ir import Assign, Call, has_loops, walk

__all__ = ["operation_cost", "prefer_adjoint"]

# rough vector-instruction counts; everything not listed (arithmetic, selects, comparisons) is 1
_WEIGHTS = {"divide": 4.0, "sqrt": 4.0, "exp": 12.0, "log": 14.0, "tanh": 14.0, "sigmoid": 12.0,
            "log1p": 16.0, "expm1": 14.0, "softplus": 24.0, "power": 30.0, "sin": 20.0, "cos": 20.0,
            "tan": 25.0, "asin": 25.0, "acos": 25.0, "atan": 20.0, "atan2": 25.0, "sinh": 20.0,
            "cosh": 20.0, "asinh": 25.0, "acosh": 25.0, "atanh": 25.0, "log2": 14.0, "log10": 14.0,
            "hypot": 8.0, "mod": 6.0, "floor_divide": 6.0}


def operation_cost(dual) -> float:
    """The weighted operation count of a transformed function (a `DualFunction`) per element."""
    fn = dual.function
    if not has_loops(fn.body):
        fn = if_convert(fn)
    return sum(_WEIGHTS.get(s.value.op, 1.0) for s in walk(fn.body)
               if isinstance(s, Assign) and isinstance(s.value, Call))


def prefer_adjoint(duals, adjoint) -> bool:
    """True when the adjoint form costs less arithmetic than the dual form (ties keep duals)."""
    return operation_cost(adjoint) < operation_cost(duals)
