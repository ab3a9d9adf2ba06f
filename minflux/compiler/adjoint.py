"""Element-local adjoint: a loop-free typed function -> one that also returns its partials, in reverse.

Forward-mode duals (`minflux.compiler.dual`) carry one partial per differentiable input through
every operation: about ``N`` extra operations per primitive for ``N`` inputs. The adjoint instead
runs the scalar function forward, then its reverse sweep inside the same element (in registers),
once per float output: about a constant number of extra operations per primitive and output,
whatever ``N`` is. The function is if-converted first (`minflux.compiler.ifconvert`), so the
forward sweep is straight-line code; every assignment gets its own name (SSA), and the reverse
sweep walks the statements backwards, adding ``adjoint(target) * rule_j`` to the adjoint of each
argument, with ``rule_j`` the derivative table's partial evaluated symbolically exactly as the
dual transform does. Only statements an output depends on are differentiated.

The no-leaked-NaN rule: a select ``where(c, a, b)`` sends the adjoint to ``a`` on lanes where ``c``
holds and to ``b`` elsewhere, so the values of a branch a lane did not take receive an adjoint of
exactly zero. Their partials may be infinite or NaN there (``sqrt`` of a negative number, ``log`` of
0, ``exp`` that overflowed), so a product with a partial that may not be finite is masked:
``where(adj == 0, 0, adj * r)``. The mask is symmetric: an adjoint that may be infinite (it has
met ``sqrt`` at 0) times a zero partial (relu's below 0, ``d(x*x)/dx`` at 0) is 0 too, so
``sqrt(relu(x))`` at ``x <= 0`` gives 0 as in forward mode and on the tape. A zero factor
annihilates, as in ForwardDiff's NaN-safe mode, and the result is the function's partial on the
path each lane took. Factors built only from the inputs, constants and operations that map finite
numbers to finite numbers (``+``, ``-``, ``*``, ``tanh``, ``sigmoid``, selects, ...) skip the mask;
such a product overflows only where the function's own values do.

The result is a `DualFunction` like the dual transform's (same outputs, ``slots`` and ``constants``),
so backends, the tape node and the derivative table are shared by both modes.

>>> from minflux.compiler.frontend import parse
>>> from minflux.compiler.kinds import infer_kinds
>>> def f(x, y):
...     return x * y + 1
>>> d = adjoint(infer_kinds(parse(f).function, ["f", "f"]), [0, 1])
>>> d.slots, d.constants
([(0, 0), (0, 1)], {})
"""
from __future__ import annotations

from .dual import DualFunction, _Sym, _Transform
from .ifconvert import if_convert
from .ir import CONVERSIONS, Assign, Call, Const, Function, Return, Var, has_loops
from .rules import TABLE

__all__ = ["adjoint", "supports_adjoint"]

_ZERO = {"f": 0.0, "i": 0, "b": False}

def _finite_op(op: str) -> bool:
    """The result of ``op`` is finite whenever its arguments are: the row says so for a primitive;
    a conversion (float, int) is."""
    prim = TABLE.get(op)
    return prim.finite if prim is not None else op in CONVERSIONS


def supports_adjoint(fn) -> bool:
    """True when ``fn`` has no loops (the adjoint differentiates straight-line code only).

    >>> from minflux.compiler.frontend import parse
    >>> from minflux.compiler.kinds import infer_kinds
    >>> def g(x):
    ...     while x > 1:
    ...         x = x / 2
    ...     return x
    >>> supports_adjoint(infer_kinds(parse(g).function, ["f"]))
    False
    """
    return not has_loops(fn.body)


def _single_assignment(fn: Function):
    """The straight-line body with every assignment to a fresh name; returns (stmts, outputs, kinds)."""
    kinds = dict(fn.kinds)
    current = {p: p for p in fn.params}
    stmts, outputs, count = [], None, 0

    def rename(atom):   # a variable read before any assignment holds its kind's zero
        if isinstance(atom, Var):
            name = current.get(atom.name)
            return Var(name) if name is not None else Const(_ZERO[kinds[atom.name]])
        return atom

    for s in fn.body:
        if isinstance(s, Assign):
            value = s.value
            value = Call(value.op, tuple(rename(a) for a in value.args)) if isinstance(value, Call) \
                else rename(value)
            name = f"a{count}"
            while name in fn.kinds or name in fn.params:   # never a name the function already uses
                count += 1
                name = f"a{count}"
            count += 1
            kinds[name] = kinds[s.target]
            current[s.target] = name
            stmts.append(Assign(name, value, s.loc))
        elif isinstance(s, Return):
            outputs = [rename(v) for v in s.values]
        else:  # pragma: no cover - if_convert leaves assignments and one return
            raise TypeError(f"not straight-line IR: {s!r}")
    return stmts, outputs, kinds


def _live(stmts: list, outputs: list) -> list:
    """The statements some output depends on, in order."""
    needed = {v.name for v in outputs if isinstance(v, Var)}
    keep = []
    for s in reversed(stmts):
        if s.target in needed:
            keep.append(s)
            args = s.value.args if isinstance(s.value, Call) else (s.value,)
            needed.update(a.name for a in args if isinstance(a, Var))
    return keep[::-1]


class _Reverse:
    def __init__(self, tx: _Transform, stmts: list, params: list):
        self.tx = tx
        self.stmts = stmts
        self.finite = {p: True for p in params}
        self.seen = 0

    def known_finite(self, atom) -> bool:
        if isinstance(atom, Const):
            return not isinstance(atom.value, float) or abs(atom.value) < float("inf")
        return self.finite.get(atom.name, False)

    def is_finite(self, atom) -> bool:
        """True when ``atom`` is finite on every lane whose inputs are finite (see the docstring)."""
        body = self.tx.out
        for s in body[self.seen:]:   # statements emitted since the last look, in order
            if isinstance(s, Assign):
                v = s.value
                args = v.args if isinstance(v, Call) else (v,)
                self.finite[s.target] = (not isinstance(v, Call) or _finite_op(v.op)) and \
                    all(self.known_finite(a) for a in args)
        self.seen = len(body)
        return self.known_finite(atom)

    def sym(self, atom):
        return _Sym(atom, self.tx)

    def is_float_var(self, atom) -> bool:
        return isinstance(atom, Var) and self.tx.kinds.get(atom.name) == "f"

    def add_to(self, adj: dict, name: str, term) -> None:
        if isinstance(term, Const) and term.value == 0:
            return
        old = adj.get(name)
        adj[name] = term if old is None else self.tx.op("add", self.sym(old), self.sym(term)).atom

    def masked_product(self, a, r):
        """``a * r`` where a zero factor annihilates the other: 0 where ``a == 0`` or ``r == 0``.

        A zero adjoint meets an infinite partial on a branch the lane did not take; a zero partial
        (relu's below 0, the ``2x`` of ``x * x`` at 0) meets an infinite adjoint (from ``sqrt`` at 0).
        Only a factor whose partner may be infinite or NaN needs the test.
        """
        op, sym = self.tx.op, self.sym
        product = op("multiply", sym(a), sym(r)).atom
        if isinstance(product, Const):
            return product
        tests = [factor for factor, partner in ((a, r), (r, a))
                 if isinstance(factor, Var) and not self.is_finite(partner)]
        if not tests:
            return product
        zero = op("equal", sym(tests[0]), 0.0)
        if len(tests) > 1:
            zero = op("logical_or", zero, op("equal", sym(tests[1]), 0.0))
        return op("where", zero, 0.0, sym(product)).atom

    def sweep(self, output) -> dict:
        """The adjoint of every variable for seed 1 on ``output``."""
        adj: dict = {output.name: Const(1.0)}
        for s in reversed(self.stmts):
            a = adj.pop(s.target, None)
            if a is None or self.tx.kinds[s.target] != "f":
                continue
            value = s.value
            if not isinstance(value, Call):
                if self.is_float_var(value):
                    self.add_to(adj, value.name, a)
                continue
            prim = TABLE.get(value.op)
            if prim is None:       # a conversion: int/bool -> float carries no derivative
                continue
            if value.op == "where":
                c, x, y = value.args
                if self.is_float_var(x):
                    self.add_to(adj, x.name, self.tx.op("where", self.sym(c), self.sym(a), 0.0).atom)
                if self.is_float_var(y):
                    self.add_to(adj, y.name, self.tx.op("where", self.sym(c), 0.0, self.sym(a)).atom)
                continue
            args = [self.sym(v) for v in value.args]
            y = self.sym(Var(s.target))
            for j, arg in enumerate(value.args):
                rule = prim.partials[j]
                if rule is None or not self.is_float_var(arg):
                    continue
                r = self.tx.atom_of(rule(self.tx.math, *args, y))
                if isinstance(r, Const) and r.value == 0:
                    continue
                self.add_to(adj, arg.name, self.masked_product(a, r))
        return adj


def adjoint(fn: Function, wrt: list) -> DualFunction:
    """The element-local adjoint of loop-free typed ``fn`` with respect to parameters ``wrt``.

    Returns the same `DualFunction` as `minflux.compiler.dual.differentiate` (see the module
    docstring); raises ValueError for a function with loops.
    """
    if not supports_adjoint(fn):
        raise ValueError(f"{fn.name}: the element-local adjoint needs a function without while/for "
                         'loops; use mode="mixed" (forward-mode duals) or mode="auto"')
    wrt = [k for k in wrt if fn.kinds.get(fn.params[k]) == "f"]
    straight = if_convert(fn)
    stmts, outputs, kinds = _single_assignment(straight)
    stmts = _live(stmts, outputs)
    typed = Function(fn.name, list(fn.params), stmts, kinds, list(fn.output_kinds),
                     {s.target for s in stmts} | set(straight.temps), dict(fn.subroutines), fn.n_outputs)
    tx = _Transform(typed, [])
    tx.temps |= {s.target for s in stmts}
    body = list(stmts)
    tx.out = body
    reverse = _Reverse(tx, stmts, list(fn.params))
    slots, constants, extra = [], {}, []
    for m, out in enumerate(outputs):
        if fn.output_kinds[m] != "f":
            continue
        adj = reverse.sweep(out) if isinstance(out, Var) else {}
        for k in wrt:
            atom = adj.get(fn.params[k], Const(0.0))
            if isinstance(atom, Const):
                if atom.value != 0:
                    constants[(m, k)] = float(atom.value)
            else:
                slots.append((m, k))
                extra.append(tx.partial_value(atom))
    body.append(Return(tuple(outputs) + tuple(extra)))
    out_fn = Function(fn.name, list(fn.params), body, tx.kinds,
                      list(fn.output_kinds) + ["f"] * len(slots), tx.temps, dict(fn.subroutines),
                      fn.n_outputs + len(slots))
    return DualFunction(out_fn, fn.n_outputs, slots, constants, tuple(wrt))
