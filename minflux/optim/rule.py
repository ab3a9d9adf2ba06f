"""The optimisation-rule protocol: small frozen objects that turn a gradient into an update.

A rule has ``init(param) -> state`` and ``apply(state, param, grad) -> (state, delta)``; the update
subtracts ``delta`` from the parameter in place (as in Optimisers.jl, so rules compose: each one's
delta is the next one's gradient). ``apply`` returns the new state (new arrays from its kernel; the
old state is not modified) and must not modify ``param`` or ``grad``. A `GlobalRule` sees every parameter of the tree at once (global-norm clipping).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import numbers
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

from ..backend import get_array_module

__all__ = ["AccumulatorRule", "GlobalRule", "OptimiserChain", "Rule", "chain", "hyperparameters"]


NON_NEGATIVE = (0.0, math.inf, True)   # (low, high, high included): finite and >= 0
UNIT = (0.0, 1.0, False)                # a decay factor in [0, 1)


def check_hyperparameter(rule: str, name: str, value, limits: tuple[float, float, bool]) -> None:
    """Refuse ``value`` for hyperparameter ``name`` of ``rule`` unless it is a real number in
    ``limits``, with one line naming the rule, the field, the value and the allowed range.

    >>> check_hyperparameter("Adam", "lr", -1.0, NON_NEGATIVE)
    Traceback (most recent call last):
    ...
    ValueError: Adam: lr must be a finite number >= 0, got -1.0
    """
    low, high, high_included = limits
    allowed = (f"a finite number >= {low:g}" if high == math.inf else
               f"a number in [{low:g}, {high:g}{']' if high_included else ')'}")
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or type(value).__name__ == "bool_":
        raise TypeError(f"{rule}: {name} must be {allowed}, got {value!r} ({type(value).__name__})")
    if not (math.isfinite(value) and low <= value and (value < high or high_included and value <= high)):
        raise ValueError(f"{rule}: {name} must be {allowed}, got {value!r}")


@dataclass(frozen=True)
class Rule:
    """Base class of rules: a frozen dataclass whose fields are its hyperparameters.

    ``limits`` maps hyperparameters to their allowed ranges; a rule made (or `optim.adjust`-ed) with
    a value outside them is refused at once, not at the first update.

    >>> import numpy as np
    >>> from minflux import optim
    >>> rule = optim.Descent(lr=0.5)
    >>> state = rule.init(np.ones(2))
    >>> rule.apply(state, np.ones(2), np.array([2.0, 4.0]))
    ((), array([1., 2.]))
    """

    limits: ClassVar[dict[str, tuple[float, float, bool]]] = {}

    def __post_init__(self):
        for name, limits in self.limits.items():
            check_hyperparameter(type(self).__name__, name, getattr(self, name), limits)

    def init(self, param) -> Any:
        """The initial state for ``param`` (empty by default)."""
        return ()

    def apply(self, state, param, grad) -> tuple[Any, Any]:
        """``(new_state, delta)``: ``param - delta`` is the updated parameter."""
        raise NotImplementedError(f"{type(self).__name__} must define apply(state, param, grad)")


@dataclass(frozen=True)
class AccumulatorRule(Rule):
    """A rule whose state is one array shaped like the parameter, starting at zero.

    >>> import numpy as np, minflux as mf
    >>> mf.optim.Momentum(0.1).init(np.ones(2))
    array([0., 0.])
    """

    def init(self, param):
        return xp_of(param).zeros_like(param)


@dataclass(frozen=True)
class GlobalRule(Rule):
    """A rule that needs every parameter at once; `optim.update` calls ``apply_all``.

    Parameters whose rules are equal (same type and hyperparameters) at the same position of their
    chains are processed together as one group.

    >>> import numpy as np, minflux as mf
    >>> isinstance(mf.optim.ClipNorm(1.0), mf.optim.GlobalRule)
    True
    """

    def apply(self, state, param, grad):
        (state,), (delta,) = self.apply_all([state], [param], [grad])
        return state, delta

    def apply_all(self, states: list, params: list, grads: list) -> tuple[list, list]:
        """``(new_states, deltas)`` for all parameters of the group."""
        raise NotImplementedError(f"{type(self).__name__} must define apply_all(states, params, grads)")


_GROUP_NAMES: contextvars.ContextVar = contextvars.ContextVar("minflux_optim_group_names", default=None)


def group_names(count: int) -> list[str]:
    """The dotted names of the ``count`` parameters a `GlobalRule`'s ``apply_all`` was given by
    `optim.update` (for its messages); ``array k`` when it was called some other way.

    >>> group_names(2)
    ['array 0', 'array 1']
    """
    names = _GROUP_NAMES.get()
    return list(names) if names is not None and len(names) == count else [f"array {k}" for k in range(count)]


@contextlib.contextmanager
def naming_group(names: list[str]):
    """Within the block, `group_names` answers ``names`` (`optim.update` around ``apply_all``).

    >>> with naming_group(["layers.0.W", "b"]):
    ...     group_names(2)
    ['layers.0.W', 'b']
    """
    token = _GROUP_NAMES.set(tuple(names))
    try:
        yield
    finally:
        _GROUP_NAMES.reset(token)


@dataclass(frozen=True)
class OptimiserChain(Rule):
    """Rules applied in sequence: each one's delta is the gradient of the next.

    Build it with `chain`. Its state is the tuple of the members' states.

    >>> from minflux import optim
    >>> optim.chain(optim.ClipValue(1.0), optim.Descent(0.1))
    OptimiserChain(rules=(ClipValue(limit=1.0), Descent(lr=0.1)))
    """

    rules: tuple = ()

    def init(self, param):
        return tuple(rule.init(param) for rule in self.rules)

    def apply(self, state, param, grad):
        new_states = []
        for rule, s in zip(self.rules, state):
            s, grad = rule.apply(s, param, grad)
            new_states.append(s)
        return tuple(new_states), grad


def chain(*rules: Rule) -> OptimiserChain:
    """Compose rules left to right, e.g. ``chain(ClipNorm(1.0), WeightDecay(1e-4), Adam(1e-3))``.

    >>> from minflux import optim
    >>> len(optim.chain(optim.ClipNorm(1.0), optim.Adam()).rules)
    2
    """
    flat = []
    for rule in rules:
        if not isinstance(rule, Rule):
            raise TypeError(f"chain takes optimisation rules (e.g. optim.Adam()), got "
                            f"{type(rule).__name__}")
        flat.extend(rule.rules if isinstance(rule, OptimiserChain) else (rule,))
    return OptimiserChain(tuple(flat))


def stages(rule: Rule) -> Sequence[Rule]:
    """The rules a parameter's update goes through, in order."""
    return rule.rules if isinstance(rule, OptimiserChain) else (rule,)


def hyperparameters(rule: Rule) -> dict:
    """The rule's hyperparameters as a dict (chains give a list of their members').

    >>> from minflux import optim
    >>> optim.hyperparameters(optim.Momentum(lr=0.1))
    {'lr': 0.1, 'rho': 0.9}
    """
    if isinstance(rule, OptimiserChain):
        return {"rules": [hyperparameters(r) for r in rule.rules]}
    return {f.name: getattr(rule, f.name) for f in dataclasses.fields(rule)}


def xp_of(*arrays):
    """The array module of a rule's arrays (numpy or CuPy)."""
    return get_array_module(*arrays, op="an optimiser update")
