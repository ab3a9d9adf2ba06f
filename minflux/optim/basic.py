"""Gradient descent and momentum rules; each per-element step is one elementwise kernel."""
from __future__ import annotations

from dataclasses import dataclass

from ..pointwise.functions import elementwise

from .rule import NON_NEGATIVE, UNIT, AccumulatorRule, Rule


@elementwise
def descent_delta(g, lr):
    """The descent step ``lr * g``."""
    return lr * g


@elementwise
def momentum_step(g, v, lr, rho):
    """Heavy-ball velocity ``v' = rho * v + lr * g``; the step is ``v'``."""
    return rho * v + lr * g


@elementwise
def nesterov_step(g, v, lr, rho):
    """Nesterov momentum: ``v' = rho * v + lr * g``, step ``rho * v' + lr * g``; returns (step, v')."""
    v_new = rho * v + lr * g
    return rho * v_new + lr * g, v_new


@dataclass(frozen=True)
class Descent(Rule):
    """Plain gradient descent: ``x -= lr * g``.

    >>> import numpy as np, minflux as mf
    >>> w = np.array([1.0, 2.0])
    >>> state = mf.optim.setup(mf.optim.Descent(0.1), w)
    >>> mf.optim.update(state, w, np.array([1.0, -1.0])); w
    array([0.9, 2.1])
    """

    lr: float = 0.1
    limits = {"lr": NON_NEGATIVE}

    def apply(self, state, param, grad):
        return state, descent_delta(grad, self.lr)


@dataclass(frozen=True)
class Momentum(AccumulatorRule):
    """Heavy-ball momentum: ``v = rho * v + lr * g; x -= v`` (``v`` starts at zero).

    >>> import numpy as np, minflux as mf
    >>> w = np.zeros(1)
    >>> state = mf.optim.setup(mf.optim.Momentum(lr=1.0, rho=0.5), w)
    >>> for _ in range(2):
    ...     mf.optim.update(state, w, np.ones(1))
    >>> w                                             # -(1) - (0.5 + 1)
    array([-2.5])
    """

    lr: float = 0.01
    rho: float = 0.9
    limits = {"lr": NON_NEGATIVE, "rho": UNIT}

    def apply(self, state, param, grad):
        v = momentum_step(grad, state, self.lr, self.rho)
        return v, v


@dataclass(frozen=True)
class Nesterov(AccumulatorRule):
    """Nesterov momentum (Sutskever et al. 2013): ``v = rho * v + lr * g; x -= rho * v + lr * g``.

    >>> import numpy as np, minflux as mf
    >>> w = np.zeros(1)
    >>> state = mf.optim.setup(mf.optim.Nesterov(lr=1.0, rho=0.5), w)
    >>> mf.optim.update(state, w, np.ones(1)); w      # v = 1, step 0.5 * 1 + 1
    array([-1.5])
    """

    lr: float = 0.001
    rho: float = 0.9
    limits = {"lr": NON_NEGATIVE, "rho": UNIT}

    def apply(self, state, param, grad):
        delta, v = nesterov_step(grad, state, self.lr, self.rho)
        return v, delta
