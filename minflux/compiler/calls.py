"""Calls in scalar functions: table primitives (``mf.*``, ``math.*``, builtins), user rules, and
inlining of other elementwise functions (their ``return`` statements become assignments and jumps).

>>> import minflux as mf, numpy as np
>>> @mf.elementwise
... def half_abs(u):
...     if u < 0:
...         return -u / 2
...     return u / 2
>>> mf.broadcast(lambda x: half_abs(x) + 1, np.array([-2.0, 4.0]))
array([2., 3.])
"""
from __future__ import annotations

from typing import Callable

from . import rules
from .errors import CompileError
from .ir import Assign, Break, Const, If, Loop, Return, Var, contains_return

_MATH_ALIASES = {"fabs": "abs", "pow": "power"}


def _table_name(target) -> str | None:
    """The derivative-table name an elementwise op declares with ``__primitive__`` (``mf.tanh``), or None."""
    name = getattr(target, "__primitive__", None)
    return name if isinstance(name, str) and name in rules.TABLE else None


def call_object(fe, target, name: str, args: list, node):
    """The value of calling ``target`` (a resolved object) inside a scalar function.

    Callees are recognised by protocol: ``__scalar_rule__`` (a `ScalarRule`: one primitive with its
    own derivative), ``__scalar_function__`` (a Python scalar function to inline) and ``__primitive__``
    (the name of a derivative-table row), besides ``math`` functions and the builtins.
    """

    def need(n_min, n_max=None):
        n_max = n_min if n_max is None else n_max
        if not n_min <= len(args) <= n_max:
            raise CompileError(f"{name}() takes {n_min if n_min == n_max else f'{n_min} to {n_max}'} "
                               f"argument(s), got {len(args)}", fe.loc(node), name)

    if target is abs:
        need(1)
        return fe.call("abs", tuple(args), node)
    if target is min or target is max:
        if len(args) < 2:
            fe.error(node, f"{name}() of fewer than two values", "pass two or more scalars")
        op = "minimum" if target is min else "maximum"
        acc = args[0]
        for a in args[1:]:
            acc = fe.call(op, (acc, a), node)
        return acc
    if target is float:
        need(1)
        return fe.call("float", tuple(args), node)
    if target is bool:
        need(1)
        return fe.call("truth", tuple(args), node)
    if target is int:
        fe.error(node, "int()", "use math.floor(x) or math.trunc(x) (they return floats here)")
    if isinstance(target, type(abs)) and getattr(target, "__module__", None) == "math":
        return _math_call(fe, target.__name__, args, node, need)
    rule = getattr(target, "__scalar_rule__", None)
    if rule is not None:
        need(rule.arity)
        fe.subroutines.update(rule.subroutines())
        fe.bindings.extend(rule.bindings())
        return fe.call(rule.op, tuple(args), node)
    inlined = getattr(target, "__scalar_function__", None)
    if callable(inlined):
        return _inline(fe, inlined, args, node)
    op = _table_name(target)
    if op is not None:
        need(rules.TABLE[op].arity)
        fe.bindings.extend(rules.TABLE[op].bindings())
        return fe.call(op, tuple(args), node)
    if target is range:
        fe.error(node, "range() outside a for statement", "use it as for k in range(n)")
    kind = type(target).__name__
    fe.error(node, f"a call to {name} (a {kind})", "call math.*, mf.* primitives, other "
             "@mf.elementwise functions or @mf.scalar_rule functions")


def _math_call(fe, fname, args, node, need):
    if fname == "log" and len(args) == 2:
        num = fe.call("log", (args[0],), node)
        den = fe.call("log", (args[1],), node)
        return fe.call("divide", (num, den), node)
    op = _MATH_ALIASES.get(fname, fname)
    if op not in rules.TABLE:
        fe.error(node, f"math.{fname}", "use a function of the derivative table (mf.* or math.exp, "
                 "log, sqrt, sin, cos, tan, tanh, ...), or add one with mf.scalar_rule")
    need(rules.TABLE[op].arity)
    return fe.call(op, tuple(args), node)


def _inline(fe, callee: Callable, args: list, node):
    """Inline elementwise function ``callee``: its body with renamed variables, returns as jumps."""
    sub = fe.nested(callee)
    if len(args) != len(sub.params):
        raise CompileError(f"{callee.__name__}() takes {len(sub.params)} argument(s), got {len(args)}",
                           fe.loc(node), callee.__name__)
    inner = sub.function()
    fe.temps |= sub.temps
    for p, a in zip(inner.params, args):
        fe.emit(Assign(p, a, fe.loc(node)))
    results = [fe.select_var() for _ in range(inner.n_outputs)]
    body = inner.body
    last = body[-1] if body else None
    simple = isinstance(last, Return) and not any(contains_return(s) for s in body[:-1])
    if simple:
        fe.out.extend(body[:-1])
        for r, v in zip(results, last.values):
            fe.emit(Assign(r, v, last.loc))
    else:
        flag = fe.select_var()
        fe.emit(Assign(flag, Const(False), fe.loc(node)))
        fe.out.extend(_eliminate_returns(body, results, flag, 0))
    values = tuple(Var(r) for r in results)
    return values if len(values) > 1 else values[0]


def _eliminate_returns(stmts: list, results: list, flag: str, depth: int) -> list:
    """Rewrite ``return v`` as ``result = v; flag = True`` plus jumps, guarding what follows."""
    out: list = []
    for i, s in enumerate(stmts):
        if isinstance(s, Return):
            out += [Assign(r, v, s.loc) for r, v in zip(results, s.values)]
            out.append(Assign(flag, Const(True), s.loc))
            if depth:
                out.append(Break(s.loc))
            return out
        if isinstance(s, If):
            out.append(If(s.cond, _eliminate_returns(s.body, results, flag, depth),
                          _eliminate_returns(s.orelse, results, flag, depth), s.loc))
        elif isinstance(s, Loop):
            out.append(Loop(_eliminate_returns(s.body, results, flag, depth + 1), s.latch, s.loc))
        else:
            out.append(s)
        if contains_return(s):
            rest = _eliminate_returns(stmts[i + 1:], results, flag, depth)
            if isinstance(s, Loop) and depth:
                out.append(If(Var(flag), [Break(s.loc)], [], s.loc))
                out += rest
            elif depth:
                out += rest
            elif rest:
                out.append(If(Var(flag), [], rest, s.loc))
            return out
    return out


