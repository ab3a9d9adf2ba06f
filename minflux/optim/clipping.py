"""Gradient clipping: elementwise (`ClipValue`) and by the global norm of the whole tree (`ClipNorm`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..pointwise.functions import elementwise
from ..pointwise.primitives import clip
from ..schedule import operation
from ..tree import map_arrays, named_leaves

from .rule import GlobalRule, Rule, group_names, xp_of


@elementwise
def clip_value(g, limit):
    """``g`` clamped to ``[-limit, limit]``."""
    return clip(g, -limit, limit)


@elementwise
def scale_by(g, factor):
    """``g * factor``."""
    return g * factor


def _device_sum_of_squares(xp, g):
    flat = g.reshape(-1)
    return xp.vdot(flat, flat).real


def _device_total(xp, grads):
    """The sum of squares of every array of ``grads`` together, as one value on their device (one
    reduction per array, summed there in float64; nothing is read to the host)."""
    return xp.stack([_device_sum_of_squares(xp, g) for g in grads]).astype(xp.float64).sum()


def global_norm(grads: Any) -> float:
    """The L2 norm of all arrays of a gradient tree together (tied arrays counted once, None skipped).

    The result is a Python float (for CuPy arrays this reads the norm from the device, once).

    >>> import numpy as np, minflux as mf
    >>> mf.optim.global_norm({"a": np.array([3.0]), "b": np.array([4.0]), "c": None})
    5.0
    """
    arrays = [g for _, g in named_leaves(grads, trainable_only=False)]
    if not arrays:
        return 0.0
    return math.sqrt(float(_device_total(xp_of(*arrays), arrays)))


def clip_factor(norm: float, max_norm: float) -> float:
    """The factor ``max_norm / norm`` when ``norm > max_norm``, else 1."""
    return max_norm / norm if norm > max_norm else 1.0


def clip_by_global_norm(grads: Any, max_norm: float) -> tuple[Any, float]:
    """``(clipped_grads, norm)``: the tree scaled so its global norm is at most ``max_norm``.

    Returns the norm before clipping (read on the host, useful to log). `ClipNorm` does the same
    inside `optim.update` without reading the norm on the host.

    >>> import numpy as np, minflux as mf
    >>> clipped, norm = mf.optim.clip_by_global_norm([np.array([3.0]), np.array([4.0])], 1.0)
    >>> norm, clipped
    (5.0, [array([0.6]), array([0.8])])
    """
    norm = global_norm(grads)
    factor = clip_factor(norm, max_norm)
    if factor == 1.0:
        return grads, norm
    return map_arrays(lambda g: scale_by(g, factor), grads, trainable_only=False), norm


@dataclass(frozen=True)
class ClipValue(Rule):
    """Clamp each gradient element to ``[-limit, limit]``.

    >>> import numpy as np, minflux as mf
    >>> rule = mf.optim.ClipValue(1.0)
    >>> rule.apply((), None, np.array([-3.0, 0.5, 2.0]))[1]
    array([-1. ,  0.5,  1. ])
    """

    limit: float = 1.0

    def apply(self, state, param, grad):
        return state, clip_value(grad, self.limit)


@dataclass(frozen=True)
class ClipNorm(GlobalRule):
    """Scale all gradients by ``max_norm / norm`` when their global L2 norm exceeds ``max_norm``.

    The norm is taken over every parameter this rule updates in one `optim.update` call (frozen
    parameters and parameters without a gradient excluded), as in Pascanu et al. (2013). A NaN or
    infinite norm raises ``FloatingPointError`` before anything changes, naming the parameters whose
    gradients hold a NaN or an infinity; this reads the norm on the host once per update. Any NaN or
    infinite element makes the norm NaN or infinite, so a finite norm also says that every gradient
    element is finite: a training loop needs no second check (a norm that only overflowed, every
    element finite, is infinite as well). ``throw=False`` opts out: the norm and the factor stay on
    the device (no synchronisation on the GPU), and a non-finite norm passes through, which turns
    every parameter it updates NaN (an infinite norm zeroes the finite elements).

    >>> import numpy as np, minflux as mf
    >>> model = {"a": np.zeros(1), "b": np.zeros(1)}
    >>> state = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Descent(1.0)), model)
    >>> mf.optim.update(state, model, {"a": np.array([3.0]), "b": np.array([4.0])})
    >>> model
    {'a': array([-0.6]), 'b': array([-0.8])}
    >>> mf.optim.update(state, model, {"a": np.array([np.nan]), "b": np.array([4.0])})
    Traceback (most recent call last):
    ...
    FloatingPointError: ClipNorm: the global gradient norm is nan: the gradient of a holds a NaN or an infinity; nothing was updated (ClipNorm(..., throw=False) lets a non-finite norm through)
    """

    max_norm: float = 1.0
    throw: bool = True

    def apply_all(self, states, params, grads):
        xp = xp_of(*grads)
        total = _device_total(xp, grads)
        if self.throw:  # the update's one read from the device
            _raise_unless_finite(total, list(grads), tuple(group_names(len(grads))))
        # the factor as arrays: no read, and the same value as max_norm / norm in Python numbers
        factor = xp.minimum(1.0, self.max_norm / xp.maximum(xp.sqrt(total), 1e-30))
        with np.errstate(invalid="ignore"):
            return list(states), [scale_by(g, factor.astype(g.dtype)) for g in grads]


@operation(results="new")
def _raise_unless_finite(total, grads: list, names: tuple) -> None:
    norm = math.sqrt(float(total))
    if math.isfinite(norm):
        return
    xp = xp_of(*grads)
    bad = [name for name, g in zip(names, grads) if not bool(xp.isfinite(g).all())]  # only once it failed
    if not bad:
        what = "every gradient element is finite, but their squares overflow"
    elif len(bad) == 1:
        what = f"the gradient of {bad[0]} holds a NaN or an infinity"
    else:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        what = f"the gradients of {len(bad)} arrays hold a NaN or an infinity: {shown}"
    raise FloatingPointError(f"ClipNorm: the global gradient norm is {norm}: {what}; nothing was updated "
                             "(ClipNorm(..., throw=False) lets a non-finite norm through)")
