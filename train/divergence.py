"""Stopping a run before a NaN or an infinity reaches the parameters, and saying where it came from."""
from __future__ import annotations

import numpy as np

import minflux as mf


class TrainingDiverged(RuntimeError):
    """The loss or the gradient became NaN or infinite; the message says where and what to do."""


def nonfinite_leaves(grads) -> list[str]:
    """The dotted names of the gradient arrays that hold a NaN or an infinity, in the model's order.

    One pass over the gradients and one read from the device, whatever their number.

    >>> nonfinite_leaves({"layers": [{"U": np.ones(2)}, {"U": np.array([1.0, np.nan])}], "b": None})
    ['layers.1.U']
    """
    leaves = list(mf.tree.named_leaves(grads, trainable_only=False))
    if not leaves:
        return []
    xp = mf.get_array_module(*[g for _, g in leaves])
    finite = mf.to_numpy(xp.stack([xp.isfinite(g).all() for _, g in leaves]))
    return [name or "<root>" for (name, _), ok in zip(leaves, np.asarray(finite)) if not ok]


def describe_nonfinite(names: list[str]) -> str:
    """``"the gradient of layers.1.U is not finite"`` (and how many others are not).

    >>> describe_nonfinite(["layers.1.U", "output.b", "embed.E"])
    'the gradient of layers.1.U is not finite (nor are those of 2 more arrays: output.b, embed.E)'
    """
    n = len(names) - 1
    more = f" (nor are those of {n} more array{'s' if n > 1 else ''}: {', '.join(names[1:6])})" if n else ""
    return f"the gradient of {names[0]} is not finite{more}"


OVERFLOWED = ("the global gradient norm overflowed (every gradient element is finite, but their squares "
              "sum to more than the dtype holds)")


def _first_rule(rule):
    return rule.rules[0] if isinstance(rule, mf.optim.OptimiserChain) and rule.rules else rule


def norm_checks_finiteness(opt_state) -> bool:
    """Whether every parameter's update starts with ``ClipNorm(throw=True)`` (so the norm it reads
    raises for any NaN or infinite gradient element, before anything changes).

    >>> norm_checks_finiteness(mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0, throw=True),
    ...                                                      mf.optim.Adam()), {"w": np.zeros(1)}))
    True
    """
    leaves = [leaf for _, leaf in mf.optim.named_state_leaves(opt_state)]
    firsts = [_first_rule(leaf.rule) for leaf in leaves]
    return bool(leaves) and all(not leaf.frozen and isinstance(first, mf.optim.ClipNorm) and first.throw
                                for leaf, first in zip(leaves, firsts))


def divergence_advice(optim, rate: float) -> str:
    """What to change before resuming a diverged run, naming only keys ``--resume`` applies and values
    that differ from the run's: a tenth of the learning rate of the failing step (``rate``), and
    clipping where it is off.

    >>> from minflux_train.config import OptimConfig
    >>> divergence_advice(OptimConfig(lr=0.002, clip_norm=1.0), 0.002)
    'Try a smaller learning rate, e.g. --set optim.lr=0.0002 (gradient clipping is already on: optim.clip_norm = 1.0).'
    >>> divergence_advice(OptimConfig(lr=0.002, clip_norm=0.0), 0.002)
    'Try a smaller learning rate, e.g. --set optim.lr=0.0002, or gradient clipping: --set optim.clip_norm=1.0.'
    """
    lr = f"--set optim.lr={min(optim.lr, rate) / 10:.3g}"
    if optim.clip_norm > 0:
        return (f"Try a smaller learning rate, e.g. {lr} (gradient clipping is already on: optim.clip_norm "
                f"= {optim.clip_norm}).")
    return f"Try a smaller learning rate, e.g. {lr}, or gradient clipping: --set optim.clip_norm=1.0."
