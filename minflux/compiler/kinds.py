"""Kind inference: give every IR variable a kind (bool, int or float) and make conversions explicit.

After `infer_kinds`, each call's operands have the kind the call computes in, every branch
condition is a bool, and every output has one kind over all ``return`` statements, so a backend can
print the IR in a statically typed language without further checks.

>>> from minflux.compiler.ir import Function, Assign, Call, Var, Const, Return, format_function
>>> f = Function("f", ["n", "x"], [Assign("t0", Call("multiply", (Var("n"), Var("x")))),
...                                Return((Var("t0"),))], temps={"t0"})
>>> typed = infer_kinds(f, ["i", "f"])
>>> print(format_function(typed))
def f(n, x):
    k0 = float(n)
    t0 = multiply(k0, x)
    return t0
>>> typed.kinds["t0"], typed.output_kinds
('f', ['f'])
"""
from __future__ import annotations

from .errors import CompileError
from .ir import (Assign, Break, Call, Const, Continue, Function, If, Loop, Return, Temporaries, Var, join,
                 operand_kind, result_kind, walk)


def _kind(atom, kinds: dict) -> str:
    return atom.kind if isinstance(atom, Const) else kinds[atom.name]


def _value_kind(value, kinds: dict) -> str:
    if isinstance(value, Call):
        arg_kinds = [_kind(a, kinds) for a in value.args]
        if value.op == "index":
            return "i"
        return result_kind(value.op, arg_kinds)
    return _kind(value, kinds)


def _infer(fn: Function, param_kinds: list) -> tuple[dict, list]:
    kinds = dict(zip(fn.params, param_kinds))
    changed = True
    while changed:
        changed = False
        for stmt in walk(fn.body):
            if isinstance(stmt, Assign):
                try:
                    k = _value_kind(stmt.value, kinds)
                except KeyError:
                    continue  # operand not yet typed; the next round sees it
                old = kinds.get(stmt.target)
                new = k if old is None else join(old, k)
                if new != old:
                    kinds[stmt.target] = new
                    changed = True
    outputs: list = []
    for stmt in walk(fn.body):
        if isinstance(stmt, Return):
            ks = [_kind(v, kinds) for v in stmt.values]
            outputs = ks if not outputs else [join(a, b) for a, b in zip(outputs, ks)]
    return kinds, outputs


_CAST_FOLD = {"f": float, "i": int, "b": bool}


def convert(atom, have: str, kind: str, new_temp: Temporaries, out: list):
    """``atom`` (of kind ``have``) as a value of ``kind``: itself, a folded constant, or a new
    temporary assigned by an explicit conversion appended to ``out`` (``x != 0`` for a bool).

    >>> out = []
    >>> convert(Var("n"), "i", "f", Temporaries("k", {}, set()), out), out[0].value
    (Var(name='k0'), Call(op='float', args=(Var(name='n'),)))
    """
    if have == kind:
        return atom
    if isinstance(atom, Const):
        return Const(_CAST_FOLD[kind](atom.value))
    name = new_temp(kind)
    if kind == "b":
        out.append(Assign(name, Call("not_equal", (atom, Const(0)))))
    else:
        out.append(Assign(name, Call("float" if kind == "f" else "int", (atom,))))
    return Var(name)


class _Typer:
    def __init__(self, kinds: dict):
        self.kinds = kinds
        self.temps: set = set()
        self.new_temp = Temporaries("k", kinds, self.temps)

    def convert(self, atom, kind: str, out: list):
        """``atom`` as a value of ``kind`` (a folded constant or a new conversion temporary)."""
        return convert(atom, _kind(atom, self.kinds), kind, self.new_temp, out)

    def value(self, value, target_kind: str, loc, out: list):
        if not isinstance(value, Call):
            return self.convert(value, target_kind, out)
        op, args = value.op, value.args
        kinds = [_kind(a, self.kinds) for a in args]
        if op == "index":
            if kinds[0] == "f":
                raise CompileError("range() got a float; range needs integers (an int argument, "
                                   "an int constant or int(...) of an integer value)", loc, "range")
            return self.convert(args[0], target_kind, out)
        if op == "truth":
            return self.convert(self.convert(args[0], "b", out), target_kind, out)
        new_args = tuple(
            a if (want := operand_kind(op, kinds, i)) is None else self.convert(a, want, out)
            for i, a in enumerate(args))
        call = Call(op, new_args)
        have = result_kind(op, kinds)
        if have == target_kind:
            return call
        name = self.new_temp(have)
        out.append(Assign(name, call, loc))
        return self.convert(Var(name), target_kind, out)

    def block(self, stmts: list, output_kinds: list) -> list:
        out: list = []
        for s in stmts:
            if isinstance(s, Assign):
                value = self.value(s.value, self.kinds[s.target], s.loc, out)
                out.append(Assign(s.target, value, s.loc))
            elif isinstance(s, If):
                cond = self.convert(s.cond, "b", out)
                out.append(If(cond, self.block(s.body, output_kinds), self.block(s.orelse, output_kinds),
                              s.loc))
            elif isinstance(s, Loop):
                out.append(Loop(self.block(s.body, output_kinds), self.block(s.latch, output_kinds),
                                s.loc))
            elif isinstance(s, Return):
                values = tuple(self.convert(v, k, out) for v, k in zip(s.values, output_kinds))
                out.append(Return(values, s.loc))
            elif isinstance(s, (Break, Continue)):
                out.append(s)
            else:  # pragma: no cover
                raise TypeError(f"not an IR statement: {s!r}")
        return out


def infer_kinds(fn: Function, param_kinds: list, output_kinds: list | None = None) -> Function:
    """A copy of ``fn`` with ``kinds``, ``output_kinds`` and explicit conversions (see module doc).

    ``output_kinds`` forces the kinds of the outputs (they are inferred from the returns otherwise).
    """
    if len(param_kinds) != len(fn.params):
        raise ValueError(f"{fn.name} has {len(fn.params)} parameters but {len(param_kinds)} kinds were given")
    kinds, outputs = _infer(fn, list(param_kinds))
    if output_kinds is not None:
        outputs = list(output_kinds)
    for s in walk(fn.body):
        if isinstance(s, Assign) and s.target not in kinds:
            raise CompileError(f"cannot tell the type of {s.target!r}", s.loc)
    typer = _Typer(kinds)
    body = typer.block(fn.body, outputs)
    return Function(fn.name, list(fn.params), body, kinds, outputs, set(fn.temps) | typer.temps,
                    dict(fn.subroutines), fn.n_outputs)
