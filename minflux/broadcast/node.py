"""The broadcast tape node: outputs of an elementwise broadcast and their per-element partials.

A broadcast's Jacobian is diagonal per input, so for outputs ``y_m`` and differentiable inputs
``x_k`` the node keeps ``dy_m/dx_k`` elementwise and its backward pass is
``grad_x_k = sum_to(sum_m grad_y_m * dy_m/dx_k, x_k.shape)``. A partial that is a Python number
(the 1 of ``x + y``) is stored as that number, never as an array.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..autograd import record


def sum_to(grad, shape: tuple):
    """Sum ``grad`` down to ``shape``: the adjoint of broadcasting ``shape`` up to ``grad.shape``.

    >>> import numpy as np
    >>> sum_to(np.ones((2, 3)), (1, 3))
    array([[2., 2., 2.]])
    >>> sum_to(np.ones((2, 3)), ())
    array(6.)
    """
    shape = tuple(shape)
    if grad.shape == shape:
        return grad
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and grad.shape[lead + i] != 1)
    out = grad.sum(axis=axes, keepdims=True) if axes else grad
    return out.reshape(shape)


def _shape_dtype(arg) -> tuple[tuple, Any]:
    value = getattr(arg, "value", arg)
    return tuple(getattr(value, "shape", ())), getattr(value, "dtype", None)


def broadcast_node(name: str, args: Sequence[Any], outputs: Sequence[Any], partials: dict):
    """Record one broadcast node and return its outputs (Tensors when an argument is tracked).

    ``partials[(m, k)]`` is ``d outputs[m] / d args[k]`` (an array broadcastable to the output, or a
    number) for every output ``m`` and every argument ``k`` that needs a gradient.

    >>> import minflux as mf, numpy as np
    >>> def double(x):
    ...     return broadcast_node("double", [x], [2 * x.value], {(0, 0): 2})
    >>> mf.gradient(lambda x: mf.sum(double(x)), np.ones(2))[0]
    array([2., 2.])
    """
    meta = [_shape_dtype(a) for a in args]
    n_out = len(outputs)

    def vjp(gout, needs):
        gs = gout if n_out > 1 else (gout,)
        grads = [None] * len(meta)
        for k, (shape, dtype) in enumerate(meta):
            if not needs[k]:
                continue
            acc = None
            for m, g in enumerate(gs):
                p = partials.get((m, k))
                if g is None or p is None:
                    continue
                term = g if (isinstance(p, (int, float)) and p == 1) else g * p
                acc = term if acc is None else acc + term
            if acc is not None:
                acc = sum_to(acc, shape)
                if dtype is not None and acc.dtype != dtype:
                    acc = acc.astype(dtype)
                grads[k] = acc
        return grads

    result = record(name, list(outputs) if n_out > 1 else outputs[0], args, vjp, multi=n_out > 1)
    return result
