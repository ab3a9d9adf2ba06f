"""Initialisers: shapes, dtypes, ranges and statistics from their definitions."""
import math

import numpy as np
import pytest

from minflux.nn import init

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def rng(seed=0):
    return np.random.default_rng(seed)


def test_glorot_uniform_bound_and_spread():
    w = init.glorot_uniform(rng(), 300, 200, dtype=np.float64)
    bound = math.sqrt(6 / 500)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.01 * bound  # std of U(-a, a) is a / sqrt(3)


def test_glorot_normal_std_and_aliases():
    w = init.glorot_normal(rng(), 300, 200, gain=2.0, dtype=np.float64)
    assert abs(w.std() - 2 * math.sqrt(2 / 500)) < 0.01
    assert init.xavier_uniform is init.glorot_uniform and init.xavier_normal is init.glorot_normal


def test_fan_of_convolution_like_shapes():
    assert init.fan_in_out((3, 4, 5, 5)) == (75, 100)


@pytest.mark.parametrize("shape", [(4, 4), (3, 6), (6, 3), (2, 3, 4)])
def test_orthogonal(shape):
    q = init.orthogonal(rng(), *shape, gain=1.5, dtype=np.float64).reshape(-1, shape[-1])
    rows, cols = q.shape
    gram = q @ q.T if rows <= cols else q.T @ q
    np.testing.assert_allclose(gram, 1.5 ** 2 * np.eye(min(rows, cols)), atol=1e-12)


def test_uniform_normal_zeros_ones():
    u = init.uniform(rng(), 1000, low=2.0, high=3.0)
    assert u.dtype == np.float32 and u.min() >= 2.0 and u.max() < 3.0
    n = init.normal(rng(), 20000, mean=1.0, std=0.5, dtype=np.float64)
    assert abs(n.mean() - 1.0) < 0.02 and abs(n.std() - 0.5) < 0.02
    np.testing.assert_array_equal(init.zeros(None, 2, 3), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(init.ones(rng(), 2), np.ones(2, np.float32))


def test_reproducible_and_explicit_generator():
    np.testing.assert_array_equal(init.glorot_uniform(rng(3), 4, 5), init.glorot_uniform(rng(3), 4, 5))
    with pytest.raises(TypeError, match="numpy.random.Generator"):
        init.glorot_uniform(3, 4, 5)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.orthogonal(rng(), 4)
