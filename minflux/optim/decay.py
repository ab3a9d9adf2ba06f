"""Weight decay as an L2 term added to the gradient."""
from __future__ import annotations

from dataclasses import dataclass

from ..pointwise.functions import elementwise

from .rule import NON_NEGATIVE, Rule


@elementwise
def weight_decay_grad(g, x, decay):
    """``g + decay * x``."""
    return g + decay * x


@dataclass(frozen=True)
class WeightDecay(Rule):
    """Add ``decay * x`` to the gradient (L2 regularisation); chain it before the main rule.

    ``chain(WeightDecay(1e-4), Adam())`` is Adam with an L2 penalty; `AdamW` decouples the decay.

    >>> import numpy as np, minflux as mf
    >>> w = np.array([2.0])
    >>> state = mf.optim.setup(mf.optim.chain(mf.optim.WeightDecay(0.5), mf.optim.Descent(0.1)), w)
    >>> mf.optim.update(state, w, np.array([1.0])); w    # 2 - 0.1 * (1 + 0.5 * 2)
    array([1.8])
    """

    decay: float = 5e-4
    limits = {"decay": NON_NEGATIVE}

    def apply(self, state, param, grad):
        return state, weight_decay_grad(grad, param, self.decay)
