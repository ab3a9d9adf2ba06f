"""Lion against the update written out from the paper (Chen et al. 2023, Algorithm 2)."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def reference_lion(x, grads, lr, beta1, beta2, decay):
    m = np.zeros_like(x)
    x = x.copy()
    for g in grads:
        c = beta1 * m + (1 - beta1) * g
        x = x - lr * (np.sign(c) + decay * x)
        m = beta2 * m + (1 - beta2) * g
    return x, m


@pytest.mark.parametrize("decay", [0.0, 0.1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lion_matches_the_paper(decay, dtype, rng):
    x0 = rng.standard_normal((3, 4)).astype(dtype)
    grads = [rng.standard_normal((3, 4)).astype(dtype) for _ in range(6)]
    rule = mf.optim.Lion(lr=0.01, beta1=0.9, beta2=0.99, decay=decay)
    x = x0.copy()
    state = mf.optim.setup(rule, x)
    for g in grads:
        mf.optim.update(state, x, g)
    want_x, want_m = reference_lion(x0.astype(np.float64), [g.astype(np.float64) for g in grads],
                                    0.01, 0.9, 0.99, decay)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(x, want_x, rtol=tol, atol=tol)
    np.testing.assert_allclose(state.state, want_m, rtol=tol, atol=tol)
    assert x.dtype == dtype and state.state.dtype == dtype


def test_every_element_moves_by_the_learning_rate():
    x = np.zeros(3)
    state = mf.optim.setup(mf.optim.Lion(lr=0.5), x)
    mf.optim.update(state, x, np.array([1e-6, -40.0, 3.0]))
    np.testing.assert_array_equal(x, [-0.5, 0.5, -0.5])


def test_lion_minimises_a_quadratic_inside_a_model(rng):
    model = {"w": rng.standard_normal(5)}
    state = mf.optim.setup(mf.optim.Lion(lr=0.02), model)
    for _ in range(500):
        g, = mf.gradient(lambda m: mf.sum((m["w"] - 1.0) ** 2), model)
        mf.optim.update(state, model, g)
    np.testing.assert_allclose(model["w"], np.ones(5), atol=0.05)
