"""A scalar function with user-given partial derivatives: a new row of the derivative table.

Inside other scalar functions a rule is one primitive: its value is the function's own body (emitted
as a subroutine) and its partials are the given rules; on arrays its value is the function's primal
kernel.

>>> import numpy as np
>>> rule = ScalarRule(lambda x: x if x > 0 else 0.1 * x, (lambda m, x, y: m.where(x > 0, 1.0, 0.1),))
>>> from minflux.compiler.rules import TABLE
>>> TABLE[rule.op].impl(np, np.array([-1.0, 2.0]))
array([-0.1,  2. ])
"""
from __future__ import annotations

import inspect
from typing import Callable

from .compiled_function import compiled, primal
from .errors import CompileError
from .kinds import infer_kinds
from .rules import define
from .source import Binding


RULES: dict[str, "ScalarRule"] = {}  # derivative-table name -> rule, for code that emits calls to it
_made: dict[str, int] = {}           # module-qualified name -> how many rules have been made under it


def _unique_name(fn: Callable) -> str:
    """The table name of a new rule for ``fn``: its module-qualified name, with ``#n`` appended from
    the second rule of that name on (two closures of one factory, two lambdas of one module), so that
    no rule ever replaces another and no name is used twice in a process."""
    base = f"{fn.__module__}.{fn.__qualname__}"
    n = _made.get(base, 0) + 1
    _made[base] = n
    return base if n == 1 else f"{base}#{n}"


def _check_signature(fn: Callable, j: int, rule, arity: int) -> None:
    """Refuse a derivative rule that cannot be called as ``rule(m, *args, y)``, now rather than at the
    first gradient."""
    if rule is None:
        return
    try:
        signature = inspect.signature(rule)
    except (TypeError, ValueError):  # a callable without a readable signature: trust it
        return
    try:
        signature.bind(*range(arity + 2))
    except TypeError:
        names = ", ".join(fn.__code__.co_varnames[:arity])
        raise TypeError(f"scalar_rule: derivative rule {j + 1} of {fn.__qualname__} has the signature "
                        f"{signature}; a rule is called as (m, *args, y), here (m, {names}, y): the "
                        f"math namespace, the function's {arity} argument(s) and its value") from None


def rule_of(row) -> "ScalarRule | None":
    """The scalar rule whose table row is ``row`` (a `Primitive`), None for any other row.

    >>> from minflux.compiler.rules import TABLE
    >>> rule = ScalarRule(lambda x: 2.0 * x, (lambda m, x, y: 2.0,))
    >>> rule_of(rule.row) is rule, rule_of(TABLE["tanh"])
    (True, None)
    """
    rule = RULES.get(row.name)
    return rule if rule is not None and rule.row is row else None


class ScalarRule:
    """The compiler's side of `mf.scalar_rule`: the table row and the function's typed subroutine.

    ``partials`` holds one rule ``lambda m, *args, y: ...`` per argument (missing trailing rules and
    None make an argument non-differentiable); the row (``row``) is registered under ``op``: the function's
    module-qualified name, made unique per rule. Each rule is its own primitive, so two rules made by
    one factory (``make(2.0)`` and ``make(3.0)`` of the same ``def``) keep their own values and
    derivatives in the table, in fused expressions and in every kernel cache; rows stay in the table
    for the life of the process (a deferred expression may still name a rule whose function is gone).
    ``launch`` runs the primal kernel on arrays (as in `CompiledFunction.run`).

    >>> import numpy as np
    >>> from minflux.compiler.rules import TABLE
    >>> def make(a):
    ...     return ScalarRule(lambda x: a * x, (lambda m, x, y: a,))
    >>> twice, thrice = make(2.0), make(3.0)
    >>> twice.op != thrice.op, TABLE[twice.op].impl(np, np.ones(1)), TABLE[thrice.op].impl(np, np.ones(1))
    (True, array([2.]), array([3.]))
    """

    def __init__(self, fn: Callable, partials: tuple, launch: Callable | None = None):
        self.fn = fn
        self.launch = launch
        self.arity = fn.__code__.co_argcount
        if len(partials) > self.arity:
            raise TypeError(f"scalar_rule got {len(partials)} derivative rules for {fn.__qualname__}, "
                            f"which takes {self.arity} arguments")
        self.partials = tuple(partials) + (None,) * (self.arity - len(partials))
        for j, rule in enumerate(self.partials):
            _check_signature(fn, j, rule, self.arity)
        self.op = _unique_name(fn)
        self._subroutines: dict | None = None
        self._parsed = None   # the parse of ``fn`` that `subroutines` was made from
        self.row = define(self.op, self.impl, *self.partials, doc=fn.__doc__ or "")
        RULES[self.op] = self

    def impl(self, xp, *args):
        """The function's value on arrays: its primal kernel."""
        return primal(self.fn, *args, launch=self.launch)

    def subroutines(self) -> dict:
        """The typed primal IR of this function (and of the rules it calls), by primitive name, made
        again once a free name it read has another value."""
        parsed = compiled(self.fn).parsed
        if self._parsed is not parsed:
            self._parsed = parsed
            typed = infer_kinds(parsed.function, ["f"] * self.arity, output_kinds=["f"])
            if typed.n_outputs != 1:
                raise CompileError(f"a scalar_rule function must return one value; "
                                   f"{self.fn.__qualname__} returns {typed.n_outputs}")
            self._subroutines = {**typed.subroutines, self.op: typed}
        return self._subroutines

    def bindings(self) -> list:
        """The free names that code calling this rule reads as constants: those of the function's
        body (its subroutine) and those of the derivative rules (read when they are expanded), as
        `Binding`s for the caller's validity check, so that changing one compiles the caller again.

        >>> derivative = eval("lambda m, x, y: SCALE", {"__name__": "experiment", "SCALE": 2.0})
        >>> [(b.name, b.value) for b in ScalarRule(lambda x: x, (derivative,)).bindings()]
        [('SCALE', 2.0)]
        """
        return [Binding(b.fn, b.name, b.value, root=False) for b in compiled(self.fn).parsed.bindings] + \
            self.row.bindings()

