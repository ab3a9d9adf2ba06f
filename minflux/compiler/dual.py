"""Forward-mode transform: a typed IR function -> one that also returns its partial derivatives.

Every float variable carries one partial per differentiable input of this call (``wrt``). Partials
are tracked at compile time as atoms: a constant (``1`` after ``y = x + 1``, ``0`` for inputs a value
does not depend on) or a variable holding the per-element value. Each primitive call adds, for every
input ``k``, ``sum_j rule_j(m, *args, y) * d arg_j / d x_k`` where ``rule_j`` is the table's partial
rule, evaluated here on symbolic values (`_Sym`), so the kernels use exactly the derivative table;
products and sums with constant 0 or 1 fold away, and rules that give Python numbers stay constants.

Control flow is kept: branches test primal values only, so a lane's partials come from the branch it
took and values of an untaken branch never reach it. Where paths with different partial atoms meet
(after an ``if``, at a loop header, after a loop), the partial is materialised in one variable per
(variable, input), assigned at the end of each incoming path. A partial of an output that is the same
constant on every ``return`` is folded out of the kernel (`DualFunction.constants`); zero partials
disappear.

The result is plain IR: backends evaluate it like any primal function, and its outputs are the
primal outputs followed by the materialised partials ``slots``.

>>> from minflux.compiler.frontend import parse
>>> from minflux.compiler.kinds import infer_kinds
>>> from minflux.compiler.ir import format_function
>>> def f(x, y):
...     return x * y + 1
>>> d = differentiate(infer_kinds(parse(f).function, ["f", "f"]), [0, 1])
>>> d.slots, d.constants
([(0, 0), (0, 1)], {})
>>> print(format_function(d.function))
def f(v_x, v_y):
    t0 = multiply(v_x, v_y)
    t1 = add(t0, 1.0)
    return t1, v_y, v_x
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .ir import (Assign, Break, Call, Const, Continue, Function, If, Loop, Return, Temporaries, Var,
                 assigned_names, operand_kind, result_kind)
from .kinds import convert
from .rules import TABLE

_ZERO = Const(0.0)


@dataclass
class DualFunction:
    """The transformed function and how its extra outputs map to partials.

    ``function`` returns ``n_outputs`` primal outputs followed by one value per entry of ``slots``:
    ``slots[i] = (m, k)`` is ``d output_m / d input_k``. ``constants[(m, k)]`` holds partials that are
    the same number everywhere: nonzero from the transforms, and 0 where
    `minflux.compiler.dependence.with_structural_zeros` adds a dependence whose partial folded away;
    pairs in neither are zero and have no differentiable dependence.
    """

    function: Function
    n_outputs: int
    slots: list = field(default_factory=list)
    constants: dict = field(default_factory=dict)
    wrt: tuple = ()


class _Pending:
    """A placeholder in an output list, filled with fix-up assignments when paths merge."""

    __slots__ = ("stmts",)

    def __init__(self):
        self.stmts: list = []


class _Sym:
    """A symbolic scalar: rules written with operators and ``m.<primitive>`` build IR on it."""

    __slots__ = ("atom", "tx")

    def __init__(self, atom, tx):
        self.atom, self.tx = atom, tx

    def __add__(self, o): return self.tx.op("add", self, o)
    def __radd__(self, o): return self.tx.op("add", o, self)
    def __sub__(self, o): return self.tx.op("subtract", self, o)
    def __rsub__(self, o): return self.tx.op("subtract", o, self)
    def __mul__(self, o): return self.tx.op("multiply", self, o)
    def __rmul__(self, o): return self.tx.op("multiply", o, self)
    def __truediv__(self, o): return self.tx.op("divide", self, o)
    def __rtruediv__(self, o): return self.tx.op("divide", o, self)
    def __pow__(self, o): return self.tx.op("power", self, o)
    def __rpow__(self, o): return self.tx.op("power", o, self)
    def __neg__(self): return self.tx.op("negative", self)
    def __abs__(self): return self.tx.op("abs", self)
    def __lt__(self, o): return self.tx.op("less", self, o)
    def __le__(self, o): return self.tx.op("less_equal", self, o)
    def __gt__(self, o): return self.tx.op("greater", self, o)
    def __ge__(self, o): return self.tx.op("greater_equal", self, o)
    def __eq__(self, o): return self.tx.op("equal", self, o)  # type: ignore[override]
    def __ne__(self, o): return self.tx.op("not_equal", self, o)  # type: ignore[override]
    __hash__ = None  # type: ignore[assignment]

    def __bool__(self):
        raise TypeError("a derivative rule branched on a symbolic value with `if`; write it with "
                        "m.where(condition, a, b) so it works on arrays and in compiled kernels")


class _RuleMath:
    """The namespace ``m`` of derivative rules when they are evaluated symbolically."""

    def __init__(self, tx):
        self._tx = tx

    def __getattr__(self, name):
        if name not in TABLE:
            raise AttributeError(f"no primitive named {name!r} in the derivative table")
        return lambda *args: self._tx.op(name, *args)


def _fold(name, values):
    with np.errstate(all="ignore"):
        args = [np.float64(v) if isinstance(v, float) else v for v in values]
        out = TABLE[name].impl(np, *args)
    out = np.asarray(out).item()
    return Const(out if isinstance(out, bool) else float(out) if isinstance(out, float) else out)


class _Transform:
    def __init__(self, fn: Function, wrt: list):
        self.fn = fn
        self.kinds = dict(fn.kinds)
        self.temps = set(fn.temps)
        self.wrt = list(wrt)
        self.new_temp = Temporaries("d", self.kinds, self.temps)
        self.out: list = []
        self.loops: list = []
        self.returns: list = []
        self.math = _RuleMath(self)
        self.owner: dict = {}
        self.assigned = set(assigned_names(fn.body))

    # -- symbolic arithmetic ---------------------------------------------------------------------
    def kind(self, atom) -> str:
        return atom.kind if isinstance(atom, Const) else self.kinds[atom.name]

    def atom_of(self, x):
        if isinstance(x, _Sym):
            return x.atom
        if isinstance(x, (bool, int, float, np.number)):
            return Const(x.item() if isinstance(x, np.number) else x)
        raise TypeError(f"a derivative rule produced {type(x).__name__}; rules must use operators, "
                        "numbers and m.<primitive>(...)")

    def op(self, name: str, *operands):
        atoms = [self.atom_of(o) for o in operands]
        if all(isinstance(a, Const) for a in atoms):
            return _Sym(_fold(name, [a.value for a in atoms]), self)
        simple = self.simplify(name, atoms)
        if simple is not None:
            return _Sym(simple, self)
        kinds = [self.kind(a) for a in atoms]
        args = []
        for i, a in enumerate(atoms):
            want = operand_kind(name, kinds, i)
            args.append(self.convert(a, want) if want is not None else a)
        target = self.new_temp(result_kind(name, kinds))
        self.out.append(Assign(target, Call(name, tuple(args))))
        return _Sym(Var(target), self)

    def convert(self, atom, kind: str):
        return convert(atom, self.kind(atom), kind, self.new_temp, self.out)

    @staticmethod
    def simplify(name, atoms):
        def is_const(a, v):
            return isinstance(a, Const) and not isinstance(a.value, bool) and a.value == v
        if name == "multiply":
            a, b = atoms
            if is_const(a, 0) or is_const(b, 0):
                return _ZERO
            if is_const(a, 1):
                return b
            if is_const(b, 1):
                return a
        elif name == "add":
            a, b = atoms
            if is_const(a, 0):
                return b
            if is_const(b, 0):
                return a
        elif name == "subtract" and is_const(atoms[1], 0):
            return atoms[0]
        elif name == "divide" and is_const(atoms[1], 1):
            return atoms[0]
        elif name == "where" and isinstance(atoms[0], Const):
            return atoms[1] if atoms[0].value else atoms[2]
        return None

    def product(self, rule, tangent):
        """``rule * tangent`` where a zero factor annihilates (``0 * inf = 0``, see `rules`).

        Only a factor that may be zero on some lane (a variable) and one that may be infinite or
        NaN (a variable or a non-finite constant) need the guard; constants fold as before.
        """
        plain = self.op("multiply", _Sym(rule, self), _Sym(tangent, self)).atom
        if not isinstance(plain, Var):
            return plain
        zeros = [a for a in (rule, tangent) if isinstance(a, Var)]
        if not all(isinstance(a, Var) or not np.isfinite(a.value) for a in (rule, tangent)):
            return plain
        zero = None
        for a in zeros:
            test = self.op("equal", _Sym(a, self), 0.0)
            zero = test if zero is None else self.op("logical_or", zero, test)
        return self.op("where", zero, 0.0, _Sym(plain, self)).atom

    def partial_value(self, atom):
        """``atom`` as a partial: a float constant or a float variable."""
        if isinstance(atom, Const):
            return Const(float(atom.value))
        if self.kinds.get(atom.name) != "f":
            return self.convert(atom, "f")
        return atom

    # -- statements ------------------------------------------------------------------------------
    def canonical(self, var: str, k: int) -> str:
        name = f"p{k}_{var}"
        self.kinds[name] = "f"
        self.owner[name] = var
        return name

    def is_canonical_of_other(self, atom, var: str) -> bool:
        return isinstance(atom, Var) and self.owner.get(atom.name, var) != var

    def partials_of(self, atom, state) -> dict:
        if isinstance(atom, Const):
            return {}
        return state.get(atom.name, {})

    def block(self, stmts: list, state: dict | None, out: list):
        saved, self.out = self.out, out
        try:
            for s in stmts:
                if state is None:
                    break
                state = self.stmt(s, state)
            return state
        finally:
            self.out = saved

    def stmt(self, s, state):
        if isinstance(s, Assign):
            return self.assign(s, state)
        if isinstance(s, If):
            return self.branch(s, state)
        if isinstance(s, Loop):
            return self.loop(s, state)
        if isinstance(s, (Break, Continue)):
            pending = _Pending()
            self.out.append(pending)
            self.out.append(s)
            ctx = self.loops[-1]
            (ctx["breaks"] if isinstance(s, Break) else ctx["continues"]).append((dict(state), pending))
            return None
        if isinstance(s, Return):
            partials = [self.partials_of(v, state) for v in s.values]
            placeholder = Return(s.values, s.loc)
            self.returns.append((placeholder, partials))
            self.out.append(placeholder)
            return None
        raise TypeError(f"not an IR statement: {s!r}")  # pragma: no cover

    def assign(self, s: Assign, state: dict):
        target, value = s.target, s.value
        state = dict(state)
        if not isinstance(value, Call):
            self.out.append(Assign(target, value, s.loc))
            if self.kinds[target] != "f":
                state[target] = {}
                return state
            ps = dict(self.partials_of(value, state))
            if target not in self.temps:
                for k, atom in list(ps.items()):
                    if self.is_canonical_of_other(atom, target):
                        name = self.canonical(target, k)
                        self.out.append(Assign(name, atom, s.loc))
                        ps[k] = Var(name)
            state[target] = ps
            return state
        if any(isinstance(a, Var) and a.name == target for a in value.args):
            tmp = self.new_temp(self.kinds[target])
            state = self.assign(Assign(tmp, value, s.loc), state)
            return self.assign(Assign(target, Var(tmp), s.loc), state)
        self.out.append(Assign(target, value, s.loc))
        prim = TABLE.get(value.op)
        if self.kinds[target] != "f" or prim is None:
            state[target] = {}
            return state
        acc: dict = {}
        y = _Sym(Var(target), self)
        args = [_Sym(a, self) for a in value.args]
        for j, a in enumerate(value.args):
            rule = prim.partials[j]
            pa = self.partials_of(a, state)
            if rule is None or not pa:
                continue
            r = self.atom_of(rule(self.math, *args, y))
            for k, dk in pa.items():
                term = self.product(r, dk)
                acc[k] = term if k not in acc else self.op("add", _Sym(acc[k], self), _Sym(term, self)).atom
        state[target] = {k: self.stable(self.partial_value(v)) for k, v in acc.items()
                         if not (isinstance(v, Const) and v.value == 0)}
        return state

    def stable(self, atom):
        """``atom``, or a copy of it when it names a variable that a later statement may reassign.

        A rule may return an argument itself (d(a*b)/da is b); a partial must not change when that
        variable is assigned again, so it is copied into a temporary.
        """
        if isinstance(atom, Var) and atom.name in self.assigned and atom.name not in self.temps:
            copy = self.new_temp(self.kinds[atom.name])
            self.out.append(Assign(copy, atom))
            return Var(copy)
        return atom

    def join(self, states: list) -> dict | None:
        live = [st for st in states if st is not None]
        if not live:
            return None
        merged: dict = {}
        names = set().union(*[st.keys() for st in live])
        for v in names:
            if v in self.temps:
                entries = [st.get(v) for st in live]
                if all(e is not None and e == entries[0] for e in entries):
                    merged[v] = entries[0]
                continue
            ks = set().union(*[st.get(v, {}).keys() for st in live])
            ps = {}
            for k in ks:
                atoms = [st.get(v, {}).get(k, _ZERO) for st in live]
                if all(a == atoms[0] for a in atoms):
                    if atoms[0] != _ZERO:
                        ps[k] = atoms[0]
                else:
                    ps[k] = Var(self.canonical(v, k))
            merged[v] = ps
        return merged

    def fill(self, merged: dict, incoming: list):
        """Emit, at the end of each incoming path, the assignments that make it agree with merged."""
        for st, pending in incoming:
            if st is None:
                continue
            for v, ps in merged.items():
                if v in self.temps:
                    continue
                for k, atom in ps.items():
                    have = st.get(v, {}).get(k, _ZERO)
                    if have != atom:
                        pending.stmts.append(Assign(atom.name, have))

    def merge(self, incoming: list):
        merged = self.join([st for st, _ in incoming])
        if merged is not None:
            self.fill(merged, incoming)
        return merged

    def branch(self, s: If, state: dict):
        body, orelse = [], []
        s1 = self.block(s.body, dict(state), body)
        s2 = self.block(s.orelse, dict(state), orelse)
        p1, p2 = _Pending(), _Pending()
        body.append(p1)
        orelse.append(p2)
        merged = self.merge([(s1, p1), (s2, p2)])
        self.out.append(If(s.cond, body, orelse, s.loc))
        return merged

    def loop(self, s: Loop, state: dict):
        entry = _Pending()
        self.out.append(entry)
        header = dict(state)
        n_returns = len(self.returns)
        while True:
            del self.returns[n_returns:]
            ctx = {"breaks": [], "continues": []}
            self.loops.append(ctx)
            body: list = []
            end = self.block(s.body, dict(header), body)
            self.loops.pop()
            p_end = _Pending()
            body.append(p_end)
            latch_in = self.merge([(end, p_end)] + ctx["continues"])
            latch: list = []
            after_latch = self.block(s.latch, latch_in, latch) if latch_in is not None else None
            back = _Pending()
            latch.append(back)
            new_header = self.join([state, after_latch])
            if new_header == header:
                break
            header = new_header
        self.fill(header, [(state, entry), (after_latch, back)])
        self.out.append(Loop(body, latch, s.loc))
        return self.merge(ctx["breaks"])


def _flatten(stmts: list) -> list:
    out: list = []
    for s in stmts:
        if isinstance(s, _Pending):
            out.extend(_flatten(s.stmts))
        elif isinstance(s, If):
            out.append(If(s.cond, _flatten(s.body), _flatten(s.orelse), s.loc))
        elif isinstance(s, Loop):
            out.append(Loop(_flatten(s.body), _flatten(s.latch), s.loc))
        else:
            out.append(s)
    return out


def differentiate(fn: Function, wrt: list) -> DualFunction:
    """Forward-mode transform of typed ``fn`` with respect to the parameters at indices ``wrt``.

    Parameters in ``wrt`` must be float; see the module docstring for what comes back.
    """
    wrt = [k for k in wrt if fn.kinds.get(fn.params[k]) == "f"]
    tx = _Transform(fn, wrt)
    state = {p: {} for p in fn.params}
    for k in wrt:
        state[fn.params[k]] = {k: Const(1.0)}
    body: list = []
    tx.block(fn.body, state, body)
    n = fn.n_outputs
    float_outputs = [m for m in range(n) if fn.output_kinds[m] == "f"]
    slots, constants = [], {}
    for m in float_outputs:
        for k in wrt:
            atoms = [partials[m].get(k, _ZERO) for _, partials in tx.returns]
            if all(isinstance(a, Const) and a == atoms[0] for a in atoms):
                if atoms and atoms[0].value != 0:
                    constants[(m, k)] = float(atoms[0].value)
            else:
                slots.append((m, k))
    for placeholder, partials in tx.returns:
        extra = tuple(partials[m].get(k, _ZERO) for m, k in slots)
        placeholder.values = tuple(placeholder.values) + extra
    out_fn = Function(fn.name, list(fn.params), _flatten(body), tx.kinds,
                      list(fn.output_kinds) + ["f"] * len(slots), tx.temps, dict(fn.subroutines),
                      n + len(slots))
    return DualFunction(out_fn, n, slots, constants, tuple(wrt))
