"""Gradient checking: compare `mf.gradient` with central finite differences in float64."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .autograd import gradient
from .backend import to_numpy
from .tensor import Tensor
from .tree import map_arrays, named_leaves


class GradientMismatch(AssertionError):
    """The analytic gradient and finite differences disagree; the message names the worst element."""


def _to_float64(tree):
    def convert(a):
        value = a.value if isinstance(a, Tensor) else a
        value = to_numpy(value)
        return value.astype(np.float64) if value.dtype.kind == "f" else value.copy()
    return map_arrays(convert, tree)


def _scalar(out) -> float:
    loss = out[0] if isinstance(out, tuple) else out
    return float(to_numpy(loss))


def check_grad(f: Callable, *args: Any, eps: float = 1e-6, rtol: float = 1e-5, atol: float = 1e-7,
               max_elements: int = 200, seed: int = 0) -> float:
    """Check ``mf.gradient(f, *args)`` against central finite differences, in float64.

    Arguments may be arrays or whole models (trees). Every float leaf is copied to float64 and up to
    ``max_elements`` entries per leaf (chosen at random beyond that) are perturbed by ``eps``. Raises
    `GradientMismatch` naming the worst element; returns the largest error relative to the tolerance
    (below 1 passes).

    >>> import minflux as mf, numpy as np
    >>> from minflux.testing import check_grad
    >>> check_grad(lambda x: mf.sum(mf.tanh(x) ** 2), np.array([0.3, -1.2])) < 1
    True
    """
    args = tuple(_to_float64(a) for a in args)
    grads = gradient(f, *args)
    rng = np.random.default_rng(seed)
    worst = (0.0, None)
    for position, (arg, grad) in enumerate(zip(args, grads)):
        analytic = dict(named_leaves(grad, trainable_only=False)) if grad is not None else {}
        for name, leaf in named_leaves(arg, trainable_only=True):
            if leaf.dtype.kind != "f":
                continue
            g = analytic.get(name)
            g = np.zeros_like(leaf) if g is None else to_numpy(g)
            if g.shape != leaf.shape:
                raise GradientMismatch(f"argument {position} leaf {name or '<array>'}: gradient shape "
                                       f"{g.shape} differs from the value's shape {leaf.shape}")
            flat = leaf.reshape(-1)
            indices = np.arange(flat.size)
            if flat.size > max_elements:
                indices = rng.choice(flat.size, max_elements, replace=False)
            for i in indices:
                old = flat[i]
                flat[i] = old + eps
                up = _scalar(f(*args))
                flat[i] = old - eps
                down = _scalar(f(*args))
                flat[i] = old
                numeric = (up - down) / (2 * eps)
                got = g.reshape(-1)[i]
                err = abs(got - numeric) / (atol + rtol * max(abs(numeric), abs(got)))
                if not err <= worst[0]:
                    index = tuple(int(j) for j in np.unravel_index(i, leaf.shape))
                    worst = (err, (position, name or "<array>", index, float(got), float(numeric)))
    if worst[1] is not None and not worst[0] <= 1:
        position, name, index, got, numeric = worst[1]
        raise GradientMismatch(f"gradient of argument {position}, leaf {name}, element {index}: "
                               f"analytic {got!r} vs finite differences {numeric!r}")
    return float(worst[0])
