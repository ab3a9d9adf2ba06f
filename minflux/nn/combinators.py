"""Layers that combine other layers: Identity, Parallel and SkipConnection (Flux's names)."""
from __future__ import annotations

from typing import Any, Callable

from .module import Module


class Identity(Module):
    """Return the input unchanged (a placeholder layer, e.g. a removed head).

    >>> import numpy as np, minflux as mf
    >>> mf.nn.Identity()(np.ones(2))
    array([1., 1.])
    """

    def __call__(self, x: Any) -> Any:
        return x

    def _repr_head(self) -> str:
        return "Identity()"


def _check_callable(layer, where: str) -> None:
    if not callable(layer):
        raise TypeError(f"{where} is a {type(layer).__name__}, which is not callable")


class Parallel(Module):
    """Apply several layers to one input and combine the results: ``connection(l1(x), l2(x), ...)``.

    Called with several inputs, layer ``k`` gets input ``k`` (``Parallel(mf.add, f, g)(x, y) =
    f(x) + g(y)``); a single layer is applied to each input. ``connection=None`` returns the tuple of
    results. Parameters are named ``layers.<index>.<name>``.

    >>> import numpy as np, minflux as mf
    >>> rng = np.random.default_rng(0)
    >>> both = mf.nn.Parallel(lambda a, b: mf.concatenate([a, b], axis=-1),
    ...                       mf.nn.Dense(3, 2, rng=rng), mf.nn.Dense(3, 4, rng=rng))
    >>> both(np.ones((5, 3), np.float32)).shape
    (5, 6)
    """

    def __init__(self, connection: Callable | None, *layers: Callable):
        if connection is not None:
            _check_callable(connection, "Parallel: the connection")
        if not layers:
            raise ValueError("Parallel needs at least one layer")
        for k, layer in enumerate(layers):
            _check_callable(layer, f"Parallel: layer {k}")
        self.connection = connection
        self.layers = list(layers)

    def __call__(self, *xs: Any) -> Any:
        if not xs:
            raise TypeError("Parallel needs at least one input")
        if len(xs) == 1:
            results = tuple(layer(xs[0]) for layer in self.layers)
        elif len(self.layers) == 1:
            results = tuple(self.layers[0](x) for x in xs)
        elif len(xs) == len(self.layers):
            results = tuple(layer(x) for layer, x in zip(self.layers, xs))
        else:
            raise ValueError(f"Parallel with {len(self.layers)} layers got {len(xs)} inputs; pass one "
                             "input for all layers or one per layer")
        return results if self.connection is None else self.connection(*results)

    def __getitem__(self, index):
        return self.layers[index]

    def __len__(self) -> int:
        return len(self.layers)


class SkipConnection(Module):
    """``connection(layer(x), x)``: a residual block with ``connection=mf.add``.

    >>> import numpy as np, minflux as mf
    >>> block = mf.nn.SkipConnection(mf.nn.Dense(3, 3, mf.tanh, rng=np.random.default_rng(0)), mf.add)
    >>> block(np.zeros((2, 3), np.float32))
    array([[0., 0., 0.],
           [0., 0., 0.]], dtype=float32)
    """

    def __init__(self, layer: Callable, connection: Callable):
        _check_callable(layer, "SkipConnection: the layer")
        _check_callable(connection, "SkipConnection: the connection")
        self.layer = layer
        self.connection = connection

    def __call__(self, x: Any) -> Any:
        return self.connection(self.layer(x), x)
