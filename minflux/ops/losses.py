"""Softmax, log-softmax, the fused, numerically stable cross-entropy over integer targets, and the
elementwise losses (mse, binary cross-entropy, KL divergence), which refuse arguments whose shapes differ
(a silent broadcast would average over the wrong pairs)."""
from __future__ import annotations

import functools

from ..autograd import record
from ..backend import as_array, get_array_module, is_array
from ..tensor import Tensor
from ._common import check_index_range, normalise_axis, value_of
from ..pointwise.primitives import greater, log, multiply, negative, softplus, subtract, where
from .indexing import take_along_axis
from .reductions import mean, stable_logsumexp, sum
from .shapes import squeeze


def softmax(x, axis: int = -1):
    """``exp(x) / sum(exp(x))`` along ``axis``, computed without overflow.

    >>> import minflux as mf, numpy as np
    >>> mf.softmax(np.array([0.0, np.log(3.0)]))
    array([0.25, 0.75])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.softmax")
    axis = normalise_axis(axis, v.ndim, "mf.softmax", tuple(v.shape))
    y = xp.exp(v - stable_logsumexp(xp, v, (axis,)))

    def vjp(g, needs):
        gy = g * y
        return [gy - y * xp.sum(gy, axis=axis, keepdims=True)]

    return record("softmax", y, [x], vjp)


def log_softmax(x, axis: int = -1):
    """``x - logsumexp(x)`` along ``axis``: log-probabilities, exact for large logits.

    >>> import minflux as mf, numpy as np
    >>> mf.log_softmax(np.array([1000.0, 1000.0]))
    array([-0.69314718, -0.69314718])
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.log_softmax")
    axis = normalise_axis(axis, v.ndim, "mf.log_softmax", tuple(v.shape))
    y = v - stable_logsumexp(xp, v, (axis,))

    def vjp(g, needs):
        return [g - xp.exp(y) * xp.sum(g, axis=axis, keepdims=True)]

    return record("log_softmax", y, [x], vjp)


_REDUCTIONS = ("mean", "sum", "none")


def _class_targets(z, targets, axis, op: str, what: str):
    """Check integer class ``targets`` against scores ``z`` (the array called ``what``) with its class
    axis ``axis``; returns ``(xp, targets as an array, the non-negative axis)``."""
    t = value_of(targets)
    xp = get_array_module(z, t, op=op)
    t = as_array(xp, t)
    shape = tuple(z.shape)
    if not shape:
        raise ValueError(f"{op}: {what} must have a class axis, got a scalar")
    axis = normalise_axis(axis, z.ndim, op, shape)
    if t.dtype.kind not in "iu":
        raise TypeError(f"{op}: targets must be integer class indices, got dtype {t.dtype}")
    expected = shape[:axis] + shape[axis + 1:]
    if tuple(t.shape) != expected:
        raise ValueError(f"{op}: {what} of shape {shape} need targets of shape {expected} "
                         f"(the {what}' shape without axis {axis}), got {tuple(t.shape)}")
    classes = shape[axis]
    if xp.__name__ == "numpy":
        check_index_range(t, classes, functools.partial(_targets_outside, op, classes))
    return xp, t, axis


def _targets_outside(op: str, classes: int, low, high) -> ValueError:
    return ValueError(f"{op}: targets must lie in [0, {classes}), got values from {low} to {high}")


def cross_entropy(logits, targets, reduction: str = "mean", axis: int = -1):
    """Cross-entropy of ``logits`` against integer class ``targets``, as one fused node.

    ``targets`` has the shape of ``logits`` without ``axis`` and holds class indices. The loss per
    element is ``logsumexp(logits) - logits[target]``; ``reduction`` is ``"mean"`` (over all elements),
    ``"sum"`` or ``"none"``. The gradient is ``softmax(logits) - onehot(targets)`` (scaled by the
    reduction), computed without forming the log-softmax on the tape.

    >>> import minflux as mf, numpy as np
    >>> logits = np.array([[0.0, 0.0], [0.0, np.log(3.0)]])
    >>> round(float(mf.cross_entropy(logits, np.array([0, 1]))), 6)  # (log 2 + log 4/3) / 2
    0.490415
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"mf.cross_entropy: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    z = value_of(logits)
    xp, t, axis = _class_targets(z, targets, axis, "mf.cross_entropy", "logits")
    classes = z.shape[axis]
    last = xp.moveaxis(z, axis, -1)
    lse = stable_logsumexp(xp, last, (-1 % last.ndim,))
    picked = xp.take_along_axis(last, xp.expand_dims(t, -1), axis=-1)
    losses = (lse - picked)[..., 0]
    count = max(t.size, 1)
    if reduction == "mean":
        out = xp.sum(losses) / count
    elif reduction == "sum":
        out = xp.sum(losses)
    else:
        out = losses

    def vjp(g, needs):
        probs = xp.exp(last - lse)
        if not probs.flags.c_contiguous:
            probs = probs.copy()
        rows = probs.reshape(-1, classes)
        rows[xp.arange(rows.shape[0]), t.reshape(-1)] -= 1
        if reduction == "none":
            probs *= xp.expand_dims(g, -1)
        else:
            probs *= g / count if reduction == "mean" else g
        return [xp.moveaxis(probs, -1, axis)]

    return record("cross_entropy", out, [logits], vjp)


def _same_shape(a, b, op: str, names: tuple[str, str]) -> None:
    """Refuse ``a`` and ``b`` of different shapes, naming both and how to broadcast on purpose."""
    shapes = [tuple(x.shape) if isinstance(x, Tensor) or is_array(x) else tuple(value_of(x).shape)
              for x in (a, b)]
    if shapes[0] != shapes[1]:
        raise ValueError(f"{op}: {names[0]} of shape {shapes[0]} and {names[1]} of shape {shapes[1]} "
                         f"differ; an elementwise loss needs equal shapes (reshape one, or broadcast on "
                         f"purpose with mf.broadcast_to({names[1]}, {shapes[0]}))")


def _reduce(losses, reduction: str, op: str):
    if reduction == "mean":
        return mean(losses)
    if reduction == "sum":
        return sum(losses)
    if reduction == "none":
        return losses
    raise ValueError(f"{op}: reduction must be one of {_REDUCTIONS}, got {reduction!r}")


def mse(predictions, targets, reduction: str = "mean"):
    """Mean squared error ``mean((predictions - targets) ** 2)`` (``reduction`` ``"mean"``, ``"sum"``
    or ``"none"``); the difference and square are elementwise ops, so they fuse.

    >>> import minflux as mf, numpy as np
    >>> float(mf.mse(np.array([1.0, 2.0]), np.array([0.0, 4.0])))
    2.5
    >>> mf.mse(np.zeros((4, 1)), np.zeros(4))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: mf.mse: predictions of shape (4, 1) and targets of shape (4,) differ; ...
    """
    _same_shape(predictions, targets, "mf.mse", ("predictions", "targets"))
    d = subtract(predictions, targets)
    return _reduce(d * d, reduction, "mf.mse")


def binary_cross_entropy_with_logits(logits, targets, reduction: str = "mean"):
    """Binary cross-entropy of ``sigmoid(logits)`` against ``targets`` in [0, 1], computed from the
    logits without overflow: ``softplus(logits) - targets * logits`` per element.

    >>> import minflux as mf, numpy as np
    >>> round(float(mf.binary_cross_entropy_with_logits(np.array([0.0, 1000.0]), np.array([1.0, 1.0]))), 6)
    0.346574
    """
    _same_shape(logits, targets, "mf.binary_cross_entropy_with_logits", ("logits", "targets"))
    return _reduce(subtract(softplus(logits), multiply(targets, logits)), reduction,
                   "mf.binary_cross_entropy_with_logits")


def nll(log_probs, targets, reduction: str = "mean", axis: int = -1):
    """Negative log-likelihood of integer class ``targets`` under ``log_probs`` (e.g. the output of
    `log_softmax`): ``-log_probs[..., target]``; ``targets`` has ``log_probs``'s shape without ``axis``.

    >>> import minflux as mf, numpy as np
    >>> log_probs = np.log(np.array([[0.5, 0.5], [0.25, 0.75]]))
    >>> round(float(mf.nll(log_probs, np.array([0, 1]))), 6)  # (log 2 + log 4/3) / 2
    0.490415
    """
    z = value_of(log_probs)
    xp, t, axis = _class_targets(z, targets, axis, "mf.nll", "log_probs")
    picked = squeeze(take_along_axis(log_probs, xp.expand_dims(t, axis), axis=axis), axis=axis)
    return _reduce(negative(picked), reduction, "mf.nll")


def kl_divergence(log_q, p, reduction: str = "mean", axis: int = -1):
    """``KL(p || q) = sum(p * (log p - log q))`` along ``axis``, for target probabilities ``p`` and
    model log-probabilities ``log_q`` (e.g. from `log_softmax`). Terms with ``p = 0`` are 0.

    ``reduction="mean"`` averages the divergence over the distributions (the other axes; PyTorch's
    ``"batchmean"``), ``"sum"`` adds them, ``"none"`` returns one per distribution.

    >>> import minflux as mf, numpy as np
    >>> p = np.array([[0.5, 0.5], [1.0, 0.0]])
    >>> log_q = np.log(np.array([[0.25, 0.75], [0.5, 0.5]]))
    >>> round(float(mf.kl_divergence(log_q, p)), 6)  # (0.5 log 2 + 0.5 log 2/3 + log 2) / 2
    0.418494
    """
    _same_shape(log_q, p, "mf.kl_divergence", ("log_q", "p"))
    positive = greater(value_of(p), 0)
    safe_p = where(positive, p, 1.0)  # p = 0 terms become 0 * (log 1 - 0): no 0 * inf anywhere
    terms = multiply(p, subtract(log(safe_p), where(positive, log_q, 0.0)))
    shape = tuple(getattr(value_of(terms), "shape", ()))
    if not shape:
        raise ValueError("mf.kl_divergence: the arguments must have a class axis, got scalars")
    axis = normalise_axis(axis, len(shape), "mf.kl_divergence", shape)
    return _reduce(sum(terms, axis=axis), reduction, "mf.kl_divergence")
