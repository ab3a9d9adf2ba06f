"""Checks for tests: gradients against central finite differences in float64, and products against
the rounding-error bound of a sum of k terms (true on every BLAS, whatever its summation order)."""
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


def assert_product_close(got, want, a, b, *, operand_rtol: float = 0.0) -> None:
    """Assert that two computations of the product ``a @ b`` agree within rounding error.

    Each of ``got`` and ``want`` may sum the k terms of an element in any order, so each lies within
    ``gamma_k |a| @ |b|`` of the exact product (``gamma_k = k u / (1 - k u)``, u the unit roundoff of
    ``got``'s dtype); they differ by at most twice that. ``operand_rtol`` widens the bound for operands
    that were themselves computed one way for ``got`` and another for ``want`` (relative error per
    element). Raises `AssertionError` naming the worst element.

    >>> import numpy as np
    >>> from minflux.testing import assert_product_close
    >>> a, b = np.random.default_rng(0).normal(size=(2, 300, 40)), np.random.default_rng(1).normal(size=(40, 3))
    >>> assert_product_close(a @ b, np.einsum("bik,kj->bij", a, b), a, b)
    """
    got, want = np.asarray(to_numpy(got)), np.asarray(to_numpy(want))
    a, b = np.abs(to_numpy(a)).astype(np.float64), np.abs(to_numpy(b)).astype(np.float64)
    k = a.shape[-1]
    unit_roundoff = np.finfo(got.dtype).eps / 2
    gamma = k * unit_roundoff / (1 - k * unit_roundoff)
    bound = (2 * gamma + 2 * operand_rtol) * np.matmul(a, b) + np.finfo(got.dtype).tiny
    if got.shape != want.shape:
        raise AssertionError(f"product shapes differ: {got.shape} vs {want.shape}")
    error = np.abs(got.astype(np.float64) - want.astype(np.float64))
    excess = error / bound
    if not np.all(excess <= 1):
        worst = np.unravel_index(int(np.nanargmax(np.where(np.isnan(excess), np.inf, excess))), excess.shape)
        raise AssertionError(f"product element {tuple(int(i) for i in worst)}: {got[worst]!r} vs {want[worst]!r}, "
                             f"error {error[worst]:.3g} above the rounding bound {bound[worst]:.3g} (k = {k})")
