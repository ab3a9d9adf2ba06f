"""Dense: the affine layer ``activation(x @ W + b)``."""
from __future__ import annotations

from typing import Callable

from ..ops import matmul

from . import init as initialisers
from ._checks import check_sizes, input_shape
from ._rng import as_generator
from .module import Module


def activation_name(fn) -> str:
    """A short name for an activation function (``tanh``, ``relu``, ...)."""
    return getattr(fn, "__name__", type(fn).__name__)


class Dense(Module):
    """Fully connected layer ``y = activation(x @ W + b)`` with ``W`` of shape ``(n_in, n_out)``.

    Inputs have the features on the last axis (any leading batch axes). ``init`` builds ``W`` from
    ``rng``; the bias starts at zero; ``bias=False`` drops it.

    >>> import numpy as np, minflux as mf
    >>> layer = mf.nn.Dense(3, 2, mf.tanh, rng=np.random.default_rng(0))
    >>> layer
    Dense(3 => 2, tanh)  # 8 parameters
    >>> layer(np.ones((5, 3), np.float32)).shape
    (5, 2)
    """

    def __init__(self, n_in: int, n_out: int, activation: Callable | None = None, *, rng,
                 bias: bool = True, init: Callable = initialisers.glorot_uniform, dtype=None):
        check_sizes("Dense", n_in=n_in, n_out=n_out)
        rng = as_generator(rng, "Dense")
        self.W = init(rng, n_in, n_out, dtype=dtype)
        self.b = initialisers.zeros(None, n_out, dtype=self.W.dtype) if bias else None
        self.activation = activation

    def __call__(self, x):
        input_shape(self._repr_head(), x, self.W.shape[0])
        y = matmul(x, self.W)
        if self.b is not None:
            y = y + self.b
        return y if self.activation is None else self.activation(y)

    def _repr_head(self) -> str:
        n_in, n_out = self.W.shape
        extra = "" if self.activation is None else f", {activation_name(self.activation)}"
        extra += "" if self.b is not None else ", bias=False"
        return f"Dense({n_in} => {n_out}{extra})"
