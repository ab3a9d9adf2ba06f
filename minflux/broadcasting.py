"""The adjoint of broadcasting: summing a gradient down to the shape an argument had."""
from __future__ import annotations


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
