"""Scalar functions built from expressions instead of Python source.

A caller that holds a computation as data -- primitives applied to values, as the fusion of deferred
elementwise ops does -- builds it here and gets the same `CompiledFunction` that `compiled(fn)`
gives for Python source, with every cache that comes with it. An expression is an `argument` (a
value the function is called with: an array or a number, classified once, when the argument is
made), a `constant` (a number compiled into the kernel) or a call of a primitive of the derivative
table (a `Primitive` row, a `scalar_rule`, or a table name) made by a `FunctionBuilder`, which
computes its calls in the order they were made, like the statements of a function. `build` gives
the `ExpressionFunction` of some outputs: its canonical structure (``key``) names it, so the same
structure over other values reuses one compiled function, and ``run`` converts the arguments once
and evaluates the function with the partials of the arguments made with ``wrt=True``.

>>> import numpy as np
>>> b = FunctionBuilder()
>>> x = argument(np.array([0.0, 1.0]), wrt=True)
>>> f = b.build([b.call("add", b.call("tanh", x), 1.5)])
>>> dual, outs = f.run()
>>> outs[0], outs[1]             # tanh(x) + 1.5, then d/dx = 1 - tanh(x)**2
(array([1.5       , 2.26159416]), array([1.        , 0.41997434]))
>>> b = FunctionBuilder()          # other values, the same structure: the same compiled function
>>> b.build([b.call("add", b.call("tanh", argument(np.ones(3), wrt=True)), 1.5)]).compiled is f.compiled
True
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..backend import get_array_module
from .arguments import classify, converted, float_dtype_of
from .compiled_function import CompiledFunction
from .frontend import Parsed
from .ir import Assign, Call, Const, Function, Return, Var, const_kind, result_kind
from .rules import TABLE, Primitive
from .scalar_rule import ScalarRule, rule_of

__all__ = ["Expression", "ExpressionFunction", "FunctionBuilder", "argument", "constant"]

_ARGUMENT, _CONSTANT, _CALL = "argument", "constant", "call"


class Expression:
    """One node of a scalar expression: an argument, a constant or a primitive call (made by
    `argument`, `constant` and `FunctionBuilder.call`). ``kind`` is its IR kind (``"b"``, ``"i"``,
    ``"f"``); an argument's ``source`` is the object it stands for, a constant's its canonical
    description.

    >>> import numpy as np
    >>> FunctionBuilder().call("less", argument(np.ones(2)), 0.5).kind
    'b'
    """

    __slots__ = ("role", "row", "args", "kind", "dtype", "value", "wrt", "source")

    def __init__(self, role: str, row, args: tuple, kind: str, dtype=None, value=None, wrt: bool = False,
                 source=None):
        self.role, self.row, self.args, self.kind, self.dtype = role, row, args, kind, dtype
        self.value, self.wrt, self.source = value, wrt, source

    def __repr__(self):
        if self.role == _CALL:
            return f"{self.row.name}({', '.join(map(repr, self.args))})"
        if self.role == _CONSTANT:
            return repr(self.value)
        return f"argument({self.kind}{', wrt' if self.wrt else ''})"


def argument(value, wrt: bool = False, source=None) -> Expression:
    """An argument of the function: an array or a number, classified (kind and dtype) here, once.

    ``wrt=True`` asks for the partials with respect to it (float arguments only). Arguments with the
    same ``source`` (default: the value itself) are one parameter of the function; a caller that
    wraps arrays passes its wrapper, and gets it back in `ExpressionFunction.sources`.

    >>> import numpy as np
    >>> a = argument(np.arange(3, dtype=np.int32))
    >>> a.kind, a.dtype
    ('i', dtype('int32'))
    """
    found = classify(value)
    if found is None:
        what = f"has dtype {value.dtype}" if hasattr(value, "dtype") else f"is a {type(value).__name__}"
        raise TypeError(f"argument(): the value {what}; pass float, int or bool arrays or numbers")
    kind, dtype = found
    if wrt and kind != "f":
        raise ValueError(f"argument(wrt=True): only float arguments have partials, this one's kind is "
                         f"{kind!r}")
    return Expression(_ARGUMENT, None, (), kind, dtype, value, bool(wrt), value if source is None else source)


def constant(value) -> Expression:
    """A number compiled into the function: a Python or numpy bool, int or float.

    >>> constant(0.5).kind, constant(True).kind
    ('f', 'b')
    """
    if not isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
        raise TypeError(f"constant(): a {type(value).__name__} is not a number; pass arrays as argument()")
    number = value.item() if isinstance(value, np.generic) else value
    return Expression(_CONSTANT, None, (), const_kind(number), None, value, False,
                      ("c", type(value).__name__, repr(value)))


def _row(primitive) -> Primitive:
    """The derivative table's row for ``primitive``: a row, a scalar rule (or a function made by
    ``mf.scalar_rule``), a table name or an op that names its primitive (``mf.tanh``)."""
    primitive = getattr(primitive, "__scalar_rule__", primitive)
    primitive = getattr(primitive, "__primitive__", primitive)
    if isinstance(primitive, ScalarRule):
        primitive = primitive.row
    if isinstance(primitive, str):
        row = TABLE.get(primitive)
        if row is None:
            raise ValueError(f"call(): unknown primitive {primitive!r}; use a name of the derivative table "
                             "(minflux.compiler.rules.TABLE) or add a row with define()")
        return row
    if isinstance(primitive, Primitive):
        if TABLE.get(primitive.name) is not primitive:
            raise ValueError(f"call(): the primitive row {primitive.name!r} is not the table's row of that "
                             "name; add it with define()")
        return primitive
    raise TypeError(f"call(): a {type(primitive).__name__} is not a primitive; pass a Primitive row, a "
                    "scalar rule or a table name")


_RESULT_KINDS: dict = {}   # (result rule of a row, argument kinds) -> result kind
_built: dict = {}
_BUILT_LIMIT = 1024


class FunctionBuilder:
    """Builds one scalar function: `call` adds a primitive call, computed in the order calls are
    made (like the statements of a function), and `build` gives the function of some outputs.

    >>> import numpy as np
    >>> b = FunctionBuilder("double")
    >>> x = argument(np.arange(3.0))
    >>> b.build([b.call("add", x, x)]).run()[1]
    [array([0., 2., 4.])]
    """

    def __init__(self, name: str = "fused"):
        self.name = name
        self.calls: list = []
        self.arguments: list = []
        self._nodes: list = []   # per call: (primitive name, the key of each argument)
        self._refs: dict = {}    # id of a call, an argument or a source -> its key

    def call(self, primitive, *args) -> Expression:
        """``primitive(*args)``: a primitive of the derivative table (its `Primitive` row, a
        `ScalarRule` or a function made by ``mf.scalar_rule``, a table name, or an op such as
        ``mf.tanh``) applied to arguments, constants and calls of this builder (numbers become
        constants).

        >>> import numpy as np
        >>> FunctionBuilder().call("multiply", argument(np.ones(2)), 2)
        multiply(argument(f), 2)
        """
        if primitive.__class__ is Primitive and TABLE.get(primitive.name) is primitive:
            row = primitive
        else:
            row = _row(primitive)
        if len(args) != row.arity:
            raise TypeError(f"call(): {row.name} takes {row.arity} argument(s), got {len(args)}")
        kinds, refs, known = [row.result], [], self._refs
        for a in args:
            if a.__class__ is not Expression:
                args = tuple([a if a.__class__ is Expression else constant(a) for a in args])
                return self.call(row, *args)
            found = known.get(id(a))
            if found is None:
                found = a.source if a.role == _CONSTANT else self._argument(a)
            kinds.append(a.kind)
            refs.append(found)
        key = tuple(kinds)
        kind = _RESULT_KINDS.get(key)
        if kind is None:
            kind = _RESULT_KINDS[key] = result_kind(row.name, kinds[1:])
        e = Expression(_CALL, row, args, kind)
        self._refs[id(e)] = ("n", len(self.calls))
        self.calls.append(e)
        self._nodes.append((row.name, tuple(refs)))
        return e

    def _argument(self, e: Expression) -> tuple:
        """The key of argument ``e``: ``("l", position)``, the position of its source's first argument."""
        if e.role != _ARGUMENT:
            raise ValueError("call(): an argument is a call made by another FunctionBuilder; make every call "
                             "of one function with one builder")
        found = self._refs.get(id(e.source))
        if found is None:
            found = self._refs[id(e.source)] = ("l", len(self.arguments))
            self.arguments.append(e)
        first = self.arguments[found[1]]
        if e is not first and (e.kind, e.dtype, e.wrt) != (first.kind, first.dtype, first.wrt):
            raise ValueError("call(): two arguments of one source differ in kind, dtype or wrt")
        self._refs[id(e)] = found
        return found

    def build(self, outputs) -> "ExpressionFunction":
        """The function computing this builder's calls, returning ``outputs`` (calls of this builder,
        arguments or constants).

        >>> import numpy as np
        >>> b = FunctionBuilder()
        >>> x = argument(np.ones(2), wrt=True)
        >>> f = b.build([b.call("multiply", x, x), b.call("negative", x)])
        >>> f.kinds, f.wrt, f.compiled.n_params
        (('f',), (0,), 1)
        """
        outputs = list(outputs)
        if not outputs or not all([o.__class__ is Expression for o in outputs]):
            raise TypeError("build() takes a non-empty list of expressions (arguments, constants, calls)")
        returns = []
        for o in outputs:
            found = self._refs.get(id(o))
            if found is None:
                found = o.source if o.role == _CONSTANT else self._argument(o)
            returns.append(found)
        return ExpressionFunction(self, outputs, tuple(returns))


class ExpressionFunction:
    """A scalar function built by a `FunctionBuilder`, over the arguments its calls use.

    ``key`` is the canonical structure (the calls in order, constants, the arguments' kinds, dtypes
    and ``wrt``): functions with equal keys share one `compiled` function. ``arguments`` are the
    distinct arguments in parameter order, ``sources`` their sources, ``kinds`` their kinds and
    ``wrt`` the positions of those made with ``wrt=True``; ``calls`` are the calls in the order the
    function computes them.

    >>> import numpy as np
    >>> b = FunctionBuilder()
    >>> f = b.build([b.call("sqrt", argument(np.full(2, 4.0)))])
    >>> f.key
    ('fused', (('sqrt', (('l', 0),)),), (('f', '<f8', False),), (('n', 0),))
    """

    def __init__(self, builder: FunctionBuilder, outputs: list, returns: tuple):
        self.name = builder.name
        self.outputs = outputs
        self.calls = list(builder.calls)
        self.arguments = arguments = list(builder.arguments)
        self.sources = [a.source for a in arguments]
        self.kinds = tuple([a.kind for a in arguments])
        self.wrt = tuple([k for k, a in enumerate(arguments) if a.wrt])
        leaves = tuple([(a.kind, None if a.dtype is None else a.dtype.str, a.wrt) for a in arguments])
        self.key = (self.name, tuple(builder._nodes), leaves, returns)

    @property
    def is_compiled(self) -> bool:
        """Whether a function of this structure has been compiled in this process."""
        return self.key in _built

    @property
    def compiled(self) -> CompiledFunction:
        """The `CompiledFunction` of this structure (built on first use, then shared)."""
        cf = _built.get(self.key)
        if cf is None or cf.parsed.bindings and not cf.valid(None):
            function = self.function()
            if len(_built) >= _BUILT_LIMIT:
                # the oldest structure goes; its machine code stays loaded in the backend and on disk,
                # so building that structure again redoes the IR passes only
                del _built[next(iter(_built))]
            rows = {id(c.row): rule_of(c.row) or c.row for c in self.calls}
            bindings = [b for row in rows.values() for b in row.bindings()]
            cf = _built[self.key] = CompiledFunction(None, Parsed(function, bindings))
            cf.name = function.name
        return cf

    def function(self) -> Function:
        """The untyped IR, named as the frontend names things (parameters ``v_*``, temporaries
        ``t<n>``), so that the compiler's passes can add their own names without a clash."""
        params = [f"v_leaf{k}" for k in range(len(self.arguments))]

        def atom(ref: tuple, e: Expression):
            if ref[0] == "n":
                return Var(f"t{ref[1]}")
            if ref[0] == "l":
                return Var(params[ref[1]])
            return Const(e.value.item() if isinstance(e.value, np.generic) else e.value)

        body, subroutines = [], {}
        for i, (c, (_, refs)) in enumerate(zip(self.calls, self.key[1])):
            body.append(Assign(f"t{i}", Call(c.row.name, tuple([atom(r, a) for r, a in zip(refs, c.args)]))))
            rule = rule_of(c.row)
            if rule is not None:
                subroutines.update(rule.subroutines())
        body.append(Return(tuple([atom(r, o) for r, o in zip(self.key[3], self.outputs)])))
        return Function(self.name, params, body, temps={f"t{i}" for i in range(len(self.calls))},
                        subroutines=subroutines, n_outputs=len(self.outputs))

    def run(self, float_dtype=None, mode: str = "auto", launch: Callable | None = None):
        """Evaluate the function on its arguments; returns ``(dual, outputs)`` as
        `CompiledFunction.run` does (``launch`` too): the outputs, then one partial per entry of
        ``dual.slots``.

        The arguments are converted here, once, to their kinds' dtypes in the kernel's float type:
        ``float_dtype``, or the float arguments' promoted type (float64 without any).
        """
        values = [a.value for a in self.arguments]
        xp = get_array_module(*values, op=f"elementwise function {self.name}")
        if float_dtype is None:
            float_dtype = float_dtype_of(tuple([a.dtype for a in self.arguments
                                                if a.kind == "f" and a.dtype is not None]))
        else:
            float_dtype = np.dtype(float_dtype)
        arrays, shape = converted(values, self.kinds, float_dtype, xp, self.name)
        return self.compiled.run(arrays, self.kinds, float_dtype, self.wrt, shape, mode, launch)

