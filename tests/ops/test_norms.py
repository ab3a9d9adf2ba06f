"""mf.norm: every numpy.linalg.norm ord/axis combination, values and finite-difference gradients."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

VECTOR_CASES = [((5,), None, None), ((5,), 2, None), ((5,), 1, None), ((5,), 3, None), ((5,), 0.5, None),
                ((5,), math.inf, None), ((5,), -math.inf, None), ((3, 4), None, 1), ((3, 4), 2, 0),
                ((2, 3, 4), 1, -1), ((2, 3, 4), None, None), ((3, 4), math.inf, 1), ((3, 4), -1, 1)]
MATRIX_CASES = [((3, 4), None, None), ((3, 4), "fro", None), ((3, 4), "nuc", None), ((3, 4), 2, None),
                ((4, 3), -2, None), ((3, 4), 1, None), ((3, 4), -1, None), ((3, 4), math.inf, None),
                ((3, 4), -math.inf, None), ((2, 3, 4), "nuc", (1, 2)), ((3, 2, 4), 2, (0, 2)),
                ((2, 3, 4), 1, (2, 1)), ((2, 3, 4), "fro", (0, 2))]


def distinct(rng, shape):
    """Values with distinct magnitudes, row and column sums, so every norm is differentiable."""
    n = int(np.prod(shape))
    signs = rng.choice([-1.0, 1.0], n)
    return (signs * (rng.permutation(n) + 1 + rng.uniform(0.1, 0.4, n)) * 0.3).reshape(shape)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,ord,axis", VECTOR_CASES + MATRIX_CASES, ids=str)
def test_norm_matches_numpy_and_finite_differences(shape, ord, axis, keepdims, rng):
    x = distinct(rng, shape)
    want = np.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    got = mf.norm(x, ord=ord, axis=axis, keepdims=keepdims)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    weights = rng.standard_normal(np.shape(want))
    check_grad(lambda x: mf.sum(mf.norm(x, ord=ord, axis=axis, keepdims=keepdims) * weights), x)


def test_the_spectral_norm_gradient_is_the_top_singular_pair(rng):
    x = rng.standard_normal((4, 3))
    u, s, vt = np.linalg.svd(x)
    g, = mf.gradient(lambda x: mf.norm(x, ord=2), x)
    np.testing.assert_allclose(g, np.outer(u[:, 0], vt[0]), atol=1e-12)


def test_the_gradient_at_zero_is_zero_not_nan():
    for ord in (None, 2, 3):
        g, = mf.gradient(lambda x: mf.norm(x, ord=ord), np.zeros(3))
        np.testing.assert_array_equal(g, np.zeros(3))


def test_zero_norm_counts_nonzeros_and_has_no_gradient():
    x = np.array([0.0, 2.0, -1.0, 0.0])
    assert float(mf.norm(x, ord=0)) == 2.0
    g, = mf.gradient(lambda x: mf.norm(x, ord=0) * mf.sum(x), x)
    np.testing.assert_array_equal(g, np.full(4, 2.0))   # the count contributes nothing


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norm_keeps_the_dtype(dtype):
    x = np.arange(6, dtype=dtype).reshape(2, 3)
    for ord in (None, "nuc", 2, 1):
        assert mf.norm(x, ord=ord).dtype == dtype
    assert mf.gradient(lambda x: mf.norm(x, ord="nuc"), x)[0].dtype == dtype


def test_norm_rejects_a_matrix_ord_for_vectors():
    with pytest.raises(ValueError, match="matrix norm"):
        mf.norm(np.ones(3), ord="fro", axis=0)
    with pytest.raises(ValueError, match="not a matrix norm"):
        mf.norm(np.ones((2, 2)), ord=3)
