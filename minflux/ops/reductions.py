"""Reductions: sum, mean, max, min and logsumexp over axes, with ``keepdims``.

``max``/``min`` send the whole gradient to the first extreme element along the reduced axes (the one
``argmax``/``argmin`` returns), like the ``maximum``/``minimum`` primitives, whose ties go to the first
argument; the result is a valid subgradient and matches the forward-mode rule.
"""
from __future__ import annotations

import numpy as np

from ..autograd import record
from ..backend import get_array_module
from ._common import keepdims_shape, normalise_axes, value_of


def _reduction_setup(x, axis, op):
    v = value_of(x)
    xp = get_array_module(v, op=op)
    shape = tuple(v.shape)
    axes = normalise_axes(axis, len(shape), op, shape)
    return v, xp, shape, axes


def sum(x, axis=None, keepdims: bool = False):
    """Sum over ``axis`` (an int, a tuple, or None for all axes).

    >>> import minflux as mf, numpy as np
    >>> mf.sum(np.ones((2, 3)), axis=0)
    array([2., 2., 2.])
    """
    v, xp, shape, axes = _reduction_setup(x, axis, "mf.sum")
    # the method: numpy's function adds a wrapper's cost to every reduction; a traced array records it
    out = v.sum(axis=axes, keepdims=keepdims) if v.__class__ is np.ndarray else xp.sum(v, axis=axes, keepdims=keepdims)
    kept = keepdims_shape(shape, axes)

    def vjp(g, needs):
        return [xp.broadcast_to(g.reshape(kept), shape)]

    return record("sum", out, [x], vjp)


def mean(x, axis=None, keepdims: bool = False):
    """Mean over ``axis`` (an int, a tuple, or None for all axes).

    >>> import minflux as mf, numpy as np
    >>> float(mf.mean(np.array([1.0, 3.0])))
    2.0
    """
    v, xp, shape, axes = _reduction_setup(x, axis, "mf.mean")
    out = xp.mean(v, axis=axes, keepdims=keepdims)
    kept = keepdims_shape(shape, axes)
    count = 1
    for a in axes:
        count *= shape[a]

    def vjp(g, needs):
        return [xp.broadcast_to(g.reshape(kept) / count, shape)]

    return record("mean", out, [x], vjp)


def _extreme(x, axis, keepdims, name, arg_name):
    op = f"mf.{name}"
    v, xp, shape, axes = _reduction_setup(x, axis, op)
    if v.size == 0:
        raise ValueError(f"{op}: cannot reduce an empty array of shape {shape}")
    out = getattr(xp, name)(v, axis=axes, keepdims=keepdims)

    def vjp(g, needs):
        # Move the reduced axes last and flatten them, so the first extreme is one arg-reduction away.
        rest = tuple(i for i in range(len(shape)) if i not in axes)
        perm = rest + axes
        moved = xp.transpose(v, perm)
        flat = moved.reshape(moved.shape[:len(rest)] + (-1,))
        winner = getattr(xp, arg_name)(flat, axis=-1)
        onehot = xp.arange(flat.shape[-1]) == xp.expand_dims(winner, -1)
        gflat = onehot * g.reshape(flat.shape[:-1] + (1,))
        inverse = tuple(perm.index(i) for i in range(len(shape)))
        return [xp.transpose(gflat.reshape(moved.shape), inverse).astype(v.dtype, copy=False)]

    return record(name, out, [x], vjp)


def max(x, axis=None, keepdims: bool = False):
    """Largest element over ``axis``; the gradient goes to the first largest element.

    >>> import minflux as mf, numpy as np
    >>> mf.max(np.array([[1.0, 5.0], [7.0, 2.0]]), axis=1)
    array([5., 7.])
    >>> mf.gradient(lambda x: mf.max(x), np.array([3.0, 3.0, 1.0]))[0]
    array([1., 0., 0.])
    """
    return _extreme(x, axis, keepdims, "max", "argmax")


def min(x, axis=None, keepdims: bool = False):
    """Smallest element over ``axis``; the gradient goes to the first smallest element.

    >>> import minflux as mf, numpy as np
    >>> mf.min(np.array([[1.0, 5.0], [7.0, 2.0]]), axis=0)
    array([1., 2.])
    """
    return _extreme(x, axis, keepdims, "min", "argmin")


def stable_logsumexp(xp, v, axes: tuple[int, ...]):
    """``log(sum(exp(v)))`` over ``axes`` with the reduced axes kept; exact for large ``|v|``."""
    peak = xp.max(v, axis=axes, keepdims=True)
    peak = xp.where(xp.isfinite(peak), peak, 0)  # all -inf (or an inf) would give inf - inf
    total = xp.sum(xp.exp(v - peak), axis=axes, keepdims=True)
    with np.errstate(divide="ignore"):  # a sum of exp(-inf) is 0; its log is the correct -inf
        return xp.log(total) + peak


def logsumexp(x, axis=None, keepdims: bool = False):
    """``log(sum(exp(x)))`` over ``axis``, computed without overflow; its gradient is the softmax.

    >>> import minflux as mf, numpy as np
    >>> mf.logsumexp(np.array([1000.0, 1000.0]))
    array(1000.69314718)
    """
    v, xp, shape, axes = _reduction_setup(x, axis, "mf.logsumexp")
    lse = stable_logsumexp(xp, v, axes)
    out = lse if keepdims else lse.reshape(tuple(n for i, n in enumerate(shape) if i not in axes))

    def vjp(g, needs):
        return [g.reshape(lse.shape) * xp.exp(v - lse)]

    return record("logsumexp", out, [x], vjp)

