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
