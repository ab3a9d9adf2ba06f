"""The scalar-function compiler's intermediate representation: a small structured scalar language.

A `Function` is a list of statements over named scalar variables. It knows nothing about arrays,
numpy, numba or CUDA: the frontend builds it from Python source, `dual` transforms it into a function
that also returns partial derivatives, and each backend (numpy, numba, CUDA C) evaluates or prints it.

Values
    ``Var(name)`` names a scalar variable; ``Const(value)`` is a Python ``bool``, ``int`` or ``float``.
    Together they are *atoms*: every operand in the IR is an atom (three-address form).

Expressions (right-hand sides)
    an atom (a copy), or ``Call(op, args)`` with atom arguments. ``op`` is the name of a primitive of
    the derivative table (`minflux.compiler.rules.TABLE`: ``add``, ``tanh``, ``where``, ``less``, a
    user rule added with `mf.scalar_rule` ...) or one of the conversions ``float`` / ``int`` (to the
    kernel's float type / to int64). Primitives with a user rule may also appear in
    ``Function.subroutines``: their primal body, which a code generator emits as a separate scalar
    function. The frontend also writes two pseudo-ops that `minflux.compiler.kinds.infer_kinds`
    replaces, so typed IR never holds them: ``truth(x)`` (Python's ``bool(x)``, which becomes the
    conversion ``x != 0``) and ``index(n)`` (a ``range`` bound, checked to be an int and copied).

Statements
    ``Assign(target, value)``        ``target = value``
    ``If(cond, body, orelse)``       branch on the primal value of atom ``cond`` (a bool after typing)
    ``Loop(body, latch)``            ``while True: body; latch`` -- ``Break`` leaves the innermost
                                     loop, ``Continue`` runs ``latch`` and starts the next iteration;
                                     ``latch`` holds assignments only. ``while c`` and ``for k in
                                     range(..)`` are loops whose body starts with ``If(c, [], [Break])``.
    ``Return(values)``               leave the function with one atom per output.

Kinds
    after `minflux.compiler.kinds.infer_kinds`, ``Function.kinds`` maps every variable to ``"b"``
    (bool), ``"i"`` (int64) or ``"f"`` (the kernel's float type, float32 or float64 by the inputs);
    operands of a call already have the kinds the call needs (conversions are explicit), and a
    condition is always a bool.

Temporaries
    names in ``Function.temps`` are assigned by exactly one statement and read only after it inside
    the same branch region, so a vectorised evaluator may assign them without masks.

>>> from minflux.compiler.ir import Function, Assign, Call, Var, Const, Return, format_function
>>> f = Function("axpy", ["a", "x"], [Assign("t0", Call("multiply", (Var("a"), Var("x")))),
...                                   Assign("t1", Call("add", (Var("t0"), Const(1.0)))),
...                                   Return((Var("t1"),))], temps={"t0", "t1"})
>>> print(format_function(f))
def axpy(a, x):
    t0 = multiply(a, x)
    t1 = add(t0, 1.0)
    return t1
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Union

from .errors import CompileError
from .rules import TABLE

KINDS = ("b", "i", "f")
CONVERSIONS = ("float", "int")


@dataclass(frozen=True)
class Var:
    """A named scalar variable."""

    name: str

    def __str__(self):
        return self.name


@dataclass(frozen=True)
class Const:
    """A compile-time constant: a Python bool, int or float."""

    value: Union[bool, int, float]

    @property
    def kind(self) -> str:
        """``"b"``, ``"i"`` or ``"f"``."""
        return const_kind(self.value)

    def __str__(self):
        return repr(self.value)



@dataclass(frozen=True)
class Call:
    """``op(*args)``: a primitive of the derivative table or a conversion, on atoms."""

    op: str
    args: tuple

    def __str__(self):
        return f"{self.op}({', '.join(str(a) for a in self.args)})"


@dataclass
class Assign:
    """``target = value`` where value is an atom or a `Call`."""

    target: str
    value: object
    loc: tuple | None = None


@dataclass
class If:
    """Run ``body`` when the primal value of ``cond`` is true, else ``orelse``."""

    cond: object
    body: list
    orelse: list
    loc: tuple | None = None


@dataclass
class Loop:
    """``while True: body; latch``; see the module docstring for Break and Continue."""

    body: list
    latch: list = field(default_factory=list)
    loc: tuple | None = None


@dataclass
class Break:
    """Leave the innermost `Loop`."""

    loc: tuple | None = None


@dataclass
class Continue:
    """Run the innermost loop's latch and start its next iteration."""

    loc: tuple | None = None


@dataclass
class Return:
    """Leave the function with one atom per output."""

    values: tuple
    loc: tuple | None = None


@dataclass
class Function:
    """A scalar function: parameters, a body, and (after typing) the kind of every variable."""

    name: str
    params: list
    body: list
    kinds: dict = field(default_factory=dict)
    output_kinds: list = field(default_factory=list)
    temps: set = field(default_factory=set)
    subroutines: dict = field(default_factory=dict)
    n_outputs: int = 1


def const_kind(value) -> str:
    """The kind of a Python constant.

    >>> const_kind(True), const_kind(2), const_kind(0.5)
    ('b', 'i', 'f')
    """
    if isinstance(value, bool):
        return "b"
    if isinstance(value, int):
        return "i"
    return "f"


def join(*kinds: str) -> str:
    """The smallest kind that holds all of ``kinds`` (bool < int < float).

    >>> join("b", "i"), join("i", "f")
    ('i', 'f')
    """
    return max(kinds, key=KINDS.index) if kinds else "b"


LOGICAL = {"logical_and", "logical_or", "logical_not"}
COMPARISONS = {"less", "less_equal", "greater", "greater_equal", "equal", "not_equal"}


def result_kind(op: str, kinds: list) -> str:
    """The kind of ``op`` applied to arguments of ``kinds``; operands are converted to it first.

    Table primitives follow their row's ``result`` rule (`minflux.compiler.rules.Primitive`); the
    pseudo-op ``truth`` gives a bool, the conversion ``int`` and the pseudo-op ``index`` an integer,
    the conversion ``float`` a float.

    >>> result_kind("add", ["i", "b"]), result_kind("add", ["i", "f"]), result_kind("tanh", ["i"])
    ('i', 'f', 'f')
    """
    prim = TABLE.get(op)
    rule = prim.result if prim is not None else {"truth": "bool", "int": "int", "index": "int"}.get(op, "float")
    if rule == "bool":
        return "b"
    if rule == "int":
        return "i"
    if rule == "arith":
        return join("i", *kinds)
    if rule == "select":
        return join(*kinds)
    if rule == "where":
        return join(*kinds[1:])
    return "f"


def operand_kind(op: str, kinds: list, position: int) -> str | None:
    """The kind argument ``position`` of ``op`` must have, or None to leave it as it is."""
    if op in COMPARISONS or op in CONVERSIONS:
        return None
    if op in LOGICAL or (op == "where" and position == 0):
        return "b"
    return result_kind(op, kinds)


class Temporaries:
    """Fresh temporary names ``<prefix><n>``, each recorded with its kind in ``kinds`` and in ``temps``.

    Every pass that adds variables owns one with its own prefix, so passes never clash.

    >>> kinds, temps = {}, set()
    >>> new = Temporaries("k", kinds, temps)
    >>> new("f"), new("b"), kinds, sorted(temps)
    ('k0', 'k1', {'k0': 'f', 'k1': 'b'}, ['k0', 'k1'])
    """

    def __init__(self, prefix: str, kinds: dict, temps: set):
        self.prefix, self.kinds, self.temps, self.count = prefix, kinds, temps, 0

    def __call__(self, kind: str) -> str:
        name = f"{self.prefix}{self.count}"
        self.count += 1
        self.kinds[name] = kind
        self.temps.add(name)
        return name


# -- walking ---------------------------------------------------------------------------------------

def walk(stmts: list) -> Iterator:
    """Every statement in ``stmts``, nested ones included (pre-order).

    >>> [type(s).__name__ for s in walk([If(Var("c"), [Break()], [Return((Const(1),))])])]
    ['If', 'Break', 'Return']
    """
    for s in stmts:
        yield s
        if isinstance(s, If):
            yield from walk(s.body)
            yield from walk(s.orelse)
        elif isinstance(s, Loop):
            yield from walk(s.body)
            yield from walk(s.latch)


def has_loops(stmts: list) -> bool:
    """True when ``stmts`` contain a `Loop`."""
    return any(isinstance(s, Loop) for s in walk(stmts))


def contains_return(stmt) -> bool:
    """True when ``stmt`` is or contains a `Return`."""
    return any(isinstance(s, Return) for s in walk([stmt]))


def breaks_out(stmts: list) -> bool:
    """True when some `Break` in ``stmts`` (outside nested loops) leaves the enclosing loop."""
    for s in stmts:
        if isinstance(s, Break):
            return True
        if isinstance(s, If) and (breaks_out(s.body) or breaks_out(s.orelse)):
            return True
    return False


def returns(stmts: list) -> Iterator[Return]:
    """Every `Return` in ``stmts``, nested ones included."""
    return (s for s in walk(stmts) if isinstance(s, Return))


def count_outputs(stmts: list) -> int:
    """The number of values every `Return` in ``stmts`` gives (a `CompileError` when they differ)."""
    counts = {len(s.values) for s in returns(stmts)}
    if len(counts) > 1:
        first = next(returns(stmts))
        raise CompileError(f"return statements give different numbers of outputs {sorted(counts)}; "
                           "return the same number of values everywhere", first.loc, "return")
    return counts.pop()


def falls_through(stmts: list) -> bool:
    """True when control can reach the end of ``stmts`` (no Return/Break/Continue on every path).

    >>> falls_through([If(Var("c"), [Return((Const(1),))], [])])
    True
    >>> falls_through([If(Var("c"), [Return((Const(1),))], [Return((Const(2),))])])
    False
    """
    for s in stmts:
        if isinstance(s, (Return, Break, Continue)):
            return False
        if isinstance(s, If) and not falls_through(s.body) and not falls_through(s.orelse):
            return False
        if isinstance(s, Loop) and not breaks_out(s.body):
            return False
    return True


def assigned_names(stmts: list) -> list:
    """Names assigned anywhere in ``stmts``, in first-assignment order."""
    seen: dict = {}
    for s in walk(stmts):
        if isinstance(s, Assign):
            seen.setdefault(s.target, None)
    return list(seen)


# -- printing --------------------------------------------------------------------------------------

def _format(stmts: list, indent: str, out: list):
    for s in stmts:
        if isinstance(s, Assign):
            out.append(f"{indent}{s.target} = {s.value}")
        elif isinstance(s, If):
            out.append(f"{indent}if {s.cond}:")
            _format(s.body or [], indent + "    ", out)
            if not s.body:
                out.append(f"{indent}    pass")
            if s.orelse:
                out.append(f"{indent}else:")
                _format(s.orelse, indent + "    ", out)
        elif isinstance(s, Loop):
            out.append(f"{indent}loop:")
            _format(s.body, indent + "    ", out)
            if s.latch:
                out.append(f"{indent}latch:")
                _format(s.latch, indent + "    ", out)
        elif isinstance(s, Break):
            out.append(f"{indent}break")
        elif isinstance(s, Continue):
            out.append(f"{indent}continue")
        elif isinstance(s, Return):
            out.append(f"{indent}return {', '.join(str(v) for v in s.values)}")
        else:  # pragma: no cover - a bug in a pass
            raise TypeError(f"not an IR statement: {s!r}")


def format_function(fn: Function) -> str:
    """The IR of ``fn`` as readable pseudo-Python (for debugging and error messages)."""
    out = [f"def {fn.name}({', '.join(fn.params)}):"]
    _format(fn.body, "    ", out)
    return "\n".join(out)
