"""Chain: layers applied one after another."""
from __future__ import annotations

from typing import Any, Callable

from .module import Module


class Chain(Module):
    """Call each layer on the output of the previous one; indexing and slicing give the layers.

    Parameters are named ``layers.<index>.<name>``.

    >>> import numpy as np, minflux as mf
    >>> rng = np.random.default_rng(0)
    >>> model = mf.nn.Chain(mf.nn.Dense(4, 8, mf.tanh, rng=rng), mf.nn.Dense(8, 2, rng=rng))
    >>> model(np.ones((3, 4), np.float32)).shape
    (3, 2)
    >>> [name for name, _ in model.named_parameters()]
    ['layers.0.W', 'layers.0.b', 'layers.1.W', 'layers.1.b']
    >>> model[0]
    Dense(4 => 8, tanh)  # 40 parameters
    """

    def __init__(self, *layers: Callable):
        for k, layer in enumerate(layers):
            if not callable(layer):
                raise TypeError(f"Chain: layer {k} is a {type(layer).__name__}, which is not callable")
        self.layers = list(layers)

    def __call__(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Chain(*self.layers[index])
        return self.layers[index]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)
