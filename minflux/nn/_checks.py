"""The layers' checks of their sizes and inputs, so that a bad one is one line naming the layer."""
from __future__ import annotations

import numpy as np

from ..backend import is_array
from ..ops._common import describe
from ..tensor import Tensor


def check_sizes(layer: str, **sizes) -> None:
    """Refuse a size that is not a positive integer, naming the layer and the argument.

    >>> check_sizes("Dense", n_in=-3, n_out=2)
    Traceback (most recent call last):
    ...
    ValueError: Dense: n_in must be a positive integer, got -3
    """
    for name, n in sizes.items():
        if not isinstance(n, (int, np.integer)) or isinstance(n, (bool, np.bool_)):
            raise TypeError(f"{layer}: {name} must be a positive integer, got {describe(n)}")
        if n <= 0:
            raise ValueError(f"{layer}: {name} must be a positive integer, got {n}")


def input_shape(layer: str, x, last: int | None = None, what: str = "inputs") -> tuple:
    """The shape of the input ``x`` of ``layer`` (an array, a Tensor, a number or a nested list), checking
    that its last axis has length ``last``; anything else is a `TypeError` saying what was given.

    >>> input_shape("Dense(3 => 2)", np.ones((4, 3)), 3)
    (4, 3)
    >>> input_shape("Dense(3 => 2)", "abc", 3)
    Traceback (most recent call last):
    ...
    TypeError: Dense(3 => 2) takes inputs as an array or a Tensor of shape (..., 3), got a str ('abc')
    """
    if isinstance(x, Tensor) or is_array(x):
        shape = tuple(x.shape)
    elif isinstance(x, (list, int, float, np.number)) and not isinstance(x, bool):
        shape = tuple(np.shape(x))
    else:
        hint = "; call a layer on one array at a time" if isinstance(x, tuple) else ""
        of_shape = "" if last is None else f" of shape (..., {last})"
        raise TypeError(f"{layer} takes {what} as an array or a Tensor{of_shape}, got {describe(x)}{hint}")
    if last is not None and shape[-1:] != (last,):
        raise ValueError(f"{layer} expects inputs whose last axis has length {last}, got shape {shape}")
    return shape
