"""If-conversion: a loop-free IR function -> straight-line IR with selects (``where``) for branches.

Both sides of every branch run on every lane; an assignment under a branch condition becomes
``x = where(condition, new, x)`` and each ``return`` writes its outputs under the condition of the
path that reaches it, so the result equals the branching function on every lane (untaken values
are computed but never selected). A CPU kernel loop over straight-line code vectorises; a branch in
it does not. Functions with loops keep their branches.

>>> from minflux.compiler.frontend import parse
>>> from minflux.compiler.kinds import infer_kinds
>>> from minflux.compiler.ir import format_function
>>> def f(x):
...     if x < 0:
...         return -x
...     return x
>>> print(format_function(if_convert(infer_kinds(parse(f).function, ["f"]))))
def f(v_x):
    o0 = 0.0
    t0 = less(v_x, 0)
    t1 = negative(v_x)
    o0 = where(t0, t1, o0)
    c0 = logical_not(t0)
    o0 = where(c0, v_x, o0)
    return o0
"""
from __future__ import annotations

from ..runtime import settings
from .ir import Assign, Call, Const, Function, If, Return, Temporaries, Var, has_loops

_ZERO = {"f": 0.0, "i": 0, "b": False}


class _Converter:
    def __init__(self, fn: Function):
        self.fn = fn
        self.kinds = dict(fn.kinds)
        self.temps = set(fn.temps)
        self.new_temp = Temporaries("c", self.kinds, self.temps)
        self.out: list = []
        self.outputs = [f"o{m}" for m in range(fn.n_outputs)]
        for name, kind in zip(self.outputs, fn.output_kinds):
            self.kinds[name] = kind

    def temp(self, kind: str) -> str:
        return self.new_temp(kind)

    def logical(self, op: str, *args):
        name = self.temp("b")
        self.out.append(Assign(name, Call(op, args)))
        return Var(name)

    def conj(self, p, c):
        if p == Const(True):
            return c
        return self.logical("logical_and", p, c)

    def negate(self, c):
        if isinstance(c, Const):
            return Const(not c.value)
        return self.logical("logical_not", c)

    def disj(self, a, b):
        if a == Const(False):
            return b
        if b == Const(False):
            return a
        if a == Const(True) or b == Const(True):
            return Const(True)
        return self.logical("logical_or", a, b)

    def select(self, target: str, pred, value):
        if pred == Const(True):
            self.out.append(Assign(target, value))
            return
        if isinstance(value, Call):
            tmp = self.temp(self.kinds[target])
            self.out.append(Assign(tmp, value))
            value = Var(tmp)
        self.out.append(Assign(target, Call("where", (pred, value, Var(target)))))

    def block(self, stmts: list, pred):
        for s in stmts:
            if pred == Const(False):
                break
            if isinstance(s, Assign):
                if s.target in self.temps:
                    self.out.append(s)
                else:
                    self.select(s.target, pred, s.value)
            elif isinstance(s, If):
                then_pred = self.conj(pred, s.cond)
                p1 = self.block(s.body, then_pred)
                else_pred = self.conj(pred, self.negate(s.cond))
                p2 = self.block(s.orelse, else_pred)
                # both sides fell through without a return: every lane that came in goes on
                pred = pred if (p1 is then_pred and p2 is else_pred) else self.disj(p1, p2)
            elif isinstance(s, Return):
                for name, value in zip(self.outputs, s.values):
                    self.select(name, pred, value)
                pred = Const(False)
            else:
                raise TypeError(f"if_convert needs a loop-free function, found {type(s).__name__}")
        return pred


def _reuse_common_calls(body: list, stable: set) -> list:
    """Replace a repeated call on unchanging operands by a copy of its first result.

    Both sides of every branch now run on every lane, so a value both branches compute (the
    ``sigmoid(i) * tanh(g)`` of two cell updates) is computed once.
    """
    seen: dict = {}
    out = []
    for s in body:
        if isinstance(s, Assign) and isinstance(s.value, Call) and s.target in stable \
                and all(isinstance(a, Const) or a.name in stable for a in s.value.args):
            key = (s.value.op, tuple((type(a), a.value if isinstance(a, Const) else a.name,
                                      type(a.value) if isinstance(a, Const) else None)
                                     for a in s.value.args))
            first = seen.get(key)
            if first is not None:
                out.append(Assign(s.target, Var(first), s.loc))
                continue
            seen[key] = s.target
        out.append(s)
    return out


def if_convert(fn: Function) -> Function:
    """The straight-line form of loop-free typed ``fn`` (see the module docstring)."""
    if has_loops(fn.body):
        raise ValueError("if_convert needs a loop-free function")
    cv = _Converter(fn)
    for name, kind in zip(cv.outputs, fn.output_kinds):
        cv.out.append(Assign(name, Const(_ZERO[kind])))
    cv.block(fn.body, Const(True))
    reassigned = {s.target for s in cv.out if isinstance(s, Assign) and s.target not in cv.temps}
    stable = cv.temps | (set(fn.params) - reassigned)
    body = _reuse_common_calls(cv.out, stable) + [Return(tuple(Var(o) for o in cv.outputs))]
    return Function(fn.name, list(fn.params), body, cv.kinds, list(fn.output_kinds), cv.temps,
                    dict(fn.subroutines), fn.n_outputs)


def prepare(fn: Function) -> Function:
    """``fn`` as a CPU kernel compiles it: if-converted when it has no loops, unless
    ``MINFLUX_NUMBA_BRANCHES=real`` keeps its branches.

    >>> from minflux.compiler.frontend import parse
    >>> from minflux.compiler.kinds import infer_kinds
    >>> def f(x):
    ...     return -x if x < 0 else x
    >>> any(isinstance(s, If) for s in prepare(infer_kinds(parse(f).function, ["f"])).body)
    False
    """
    if settings.get("numba_branches") != "real" and not has_loops(fn.body):
        return if_convert(fn)
    return fn
