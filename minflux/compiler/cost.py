"""The cost model that picks the AD mode of a kernel: forward-mode duals or the element-local adjoint.

Both modes read the same inputs; they write the same primal outputs and each writes the partials it
cannot prove constant (duals see a partial that is the same constant on every path, the adjoint
does not always), and they differ in arithmetic per element. The model counts both on the code each
mode would run: the transformed IR after if-conversion (what the CPU backend compiles), each call
weighted by its cost relative to one ``add``, plus `OUTPUT_STREAM` for every array written per
element. Duals win on sparse or narrow functions (a partial that is a known constant costs nothing,
a value that depends on one input carries one partial); the adjoint wins when many inputs meet in a
few outputs (an ``N``-way product costs ``N^2`` dual updates but ``O(N)`` adjoint ones).

The weights were measured by ``python benchmarks/cost_weights.py`` (results in
``benchmarks/results/cost_weights.md``): each primitive's time per element in a compute-bound float32
kernel divided by an add's, and the time of one more output stream of a ``(1024, 1024)`` kernel in
the same units. Rerun it on new hardware and copy the rounded weights to the rows' ``cost``
(`minflux.compiler.rules`). The float32 forms of exp,
log, tanh, sigmoid, log1p, expm1 and softplus are vectorised (`minflux.compiler.fastmath`); the
other transcendental functions are scalar libm calls, dozens to hundreds of adds each. On the arity
benchmark (``N``-way products, N = 1..18) and the HM-LSTM cell update this picks the measured-faster
mode (or one within 2% of it) in every case; at N = 1 both modes run in the same time.

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
from .rules import TABLE

__all__ = ["OUTPUT_STREAM", "operation_cost", "prefer_adjoint"]

OUTPUT_STREAM = 3.5   # one more array written per element (out of cache), in adds


def operation_cost(dual) -> float:
    """The weighted operation count of a transformed function (a `DualFunction`) per element, its
    output streams included."""
    fn = dual.function
    streams = OUTPUT_STREAM * fn.n_outputs
    if not has_loops(fn.body):
        fn = if_convert(fn)
    return streams + sum(_weight(s.value.op) for s in walk(fn.body)
                         if isinstance(s, Assign) and isinstance(s.value, Call))


def _weight(op: str) -> float:
    """A call's cost in adds: its row's ``cost`` (pseudo-ops such as conversions cost one)."""
    prim = TABLE.get(op)
    return 1.0 if prim is None else prim.cost


def prefer_adjoint(duals, adjoint) -> bool:
    """True when the adjoint form costs less arithmetic than the dual form (ties keep duals)."""
    return operation_cost(adjoint) < operation_cost(duals)
