"""Which outputs of a scalar function reach which inputs through differentiable operations.

A gradient is a zero array, not None, where an input reaches the result only through operations
whose derivative is zero (``x * 0.0``, ``x ** 0``, ``floor(x)``, ``sign(x) * y``, a branch no lane
took), exactly as on the tape, where such an op records a node whose partial is 0. It is None where
the input reaches the result through no differentiable operation at all: not used, or only in
conditions and comparisons (which carry no derivative). The transforms fold zero partials away, so
this analysis says which folded pairs must still come back as zeros. It is flow-insensitive (every
statement of every branch and loop counts), as op-by-op evaluation records every branch a lane may
take as a ``where``.

>>> import minflux as mf
>>> from minflux.compiler.frontend import parse
>>> from minflux.compiler.kinds import infer_kinds
>>> def f(x, y, z):
...     return mf.floor(x) * y if z > 0 else y
>>> typed = infer_kinds(parse(f).function, ["f", "f", "f"])
>>> differentiable_dependence(typed, [0, 1, 2])
[frozenset({0, 1})]
"""
from __future__ import annotations

import dataclasses

from .dual import DualFunction
from .ir import Assign, Call, Function, Var, returns, walk
from .rules import TABLE

__all__ = ["differentiable_dependence", "with_structural_zeros"]


def _sources(value) -> list:
    """The variables ``value`` reads at a differentiable position."""
    if isinstance(value, Var):
        return [value.name]
    if not isinstance(value, Call):
        return []
    prim = TABLE.get(value.op)
    if prim is None:   # a conversion (float, int) or a pseudo-op: no derivative
        return []
    return [a.name for a, rule in zip(value.args, prim.partials) if rule is not None and isinstance(a, Var)]


def differentiable_dependence(fn: Function, wrt) -> list:
    """For each output of typed ``fn``, the parameters of ``wrt`` it reaches through differentiable
    operations (a frozenset of parameter positions); empty for outputs that are not floats."""
    kinds = fn.kinds
    deps: dict = {fn.params[k]: {k} for k in wrt if kinds.get(fn.params[k], "f") == "f"}
    assigns = [(s.target, _sources(s.value)) for s in walk(fn.body)
               if isinstance(s, Assign) and kinds.get(s.target, "f") == "f"]
    changed = True
    while changed:     # loops carry dependences around: iterate to the fixed point
        changed = False
        for target, sources in assigns:
            new = set()
            for name in sources:
                new |= deps.get(name, set())
            old = deps.setdefault(target, set())
            if not new <= old:
                old |= new
                changed = True
    outputs = [set() for _ in range(fn.n_outputs)]
    for r in returns(fn.body):
        for m, v in enumerate(r.values):
            if isinstance(v, Var):
                outputs[m] |= deps.get(v.name, set())
    output_kinds = list(fn.output_kinds) or ["f"] * fn.n_outputs
    return [frozenset(ks) if kind == "f" else frozenset() for ks, kind in zip(outputs, output_kinds)]


def with_structural_zeros(dual: DualFunction, typed: Function) -> DualFunction:
    """``dual`` with a constant partial 0 for every (output, input) pair that depends differentiably
    but whose partial the transform folded to zero (see the module docstring)."""
    have = set(dual.slots) | set(dual.constants)
    zeros = {(m, k): 0.0 for m, ks in enumerate(differentiable_dependence(typed, dual.wrt))
             for k in sorted(ks) if (m, k) not in have and m < dual.n_outputs}
    if not zeros:
        return dual
    return dataclasses.replace(dual, constants={**dual.constants, **zeros})
