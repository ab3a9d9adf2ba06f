"""Reductions: values against numpy, gradients against finite differences and explicit formulas."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

CASES = [((5,), None), ((5,), 0), ((5,), -1), ((3, 4), None), ((3, 4), 0), ((3, 4), 1), ((3, 4), (0, 1)),
         ((2, 3, 4), 1), ((2, 3, 4), (0, 2)), ((2, 3, 4), -1), ((), None)]


def distinct(rng, shape):
    """Values without ties (a random permutation, scaled), so max/min are unique."""
    n = int(np.prod(shape))
    return np.asarray((rng.permutation(n).reshape(shape) + rng.uniform(0.1, 0.4, shape)) * 0.5)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", CASES, ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "logsumexp"])
def test_reduction_value_and_gradient(name, shape, axis, keepdims, rng):
    op = getattr(mf, name)
    x = distinct(rng, shape)
    if name == "logsumexp":
        shifted = x - np.max(x, axis=axis, keepdims=True)
        want = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=keepdims)) + np.max(x, axis=axis,
                                                                                     keepdims=keepdims)
    else:
        want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    got = op(x, axis=axis, keepdims=keepdims)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    w = rng.standard_normal(np.shape(want))
    check_grad(lambda x: mf.sum(op(x, axis=axis, keepdims=keepdims) * w), x)


def test_max_ties_send_the_gradient_to_the_first_maximum():
    x = np.array([[1.0, 4.0, 4.0], [2.0, 2.0, 2.0]])
    g = mf.gradient(lambda x: mf.sum(mf.max(x, axis=1)), x)[0]
    np.testing.assert_array_equal(g, [[0, 1, 0], [1, 0, 0]])
    g = mf.gradient(lambda x: mf.min(x), x)[0]  # first minimum in C order over all axes
    np.testing.assert_array_equal(g, [[1, 0, 0], [0, 0, 0]])
    g = mf.gradient(lambda x: mf.sum(mf.max(x, axis=0)), x)[0]
    np.testing.assert_array_equal(g, [[0, 1, 1], [1, 0, 0]])


def test_mean_gradient_is_one_over_count():
    g = mf.gradient(lambda x: mf.mean(x, axis=(0, 2)).sum(), np.zeros((2, 3, 5)))[0]
    np.testing.assert_allclose(g, np.full((2, 3, 5), 1 / 10))


def test_logsumexp_is_stable_and_its_gradient_is_softmax():
    x = np.array([1000.0, 1000.0, -np.inf])
    np.testing.assert_allclose(mf.logsumexp(x), 1000.0 + np.log(2.0))
    g = mf.gradient(mf.logsumexp, x)[0]
    np.testing.assert_allclose(g, [0.5, 0.5, 0.0])
    assert np.isneginf(mf.logsumexp(np.full(3, -np.inf)))


def test_tensor_methods_delegate(rng):
    x = rng.standard_normal((3, 4))
    t = mf.Tensor(x)
    np.testing.assert_allclose(t.sum(axis=0).value, x.sum(axis=0))
    np.testing.assert_allclose(t.mean().value, x.mean())
    np.testing.assert_allclose(t.max(axis=1, keepdims=True).value, x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(t.min().value, x.min())


def test_axis_errors_name_the_op_and_shape():
    with pytest.raises(ValueError, match=r"mf\.sum: axis 2 is out of range for an array of shape \(2, 3\)"):
        mf.sum(np.ones((2, 3)), axis=2)
    with pytest.raises(ValueError, match=r"mf\.max: repeated axis"):
        mf.max(np.ones((2, 3)), axis=(0, 0))
    with pytest.raises(ValueError, match=r"mf\.min: cannot reduce an empty array"):
        mf.min(np.ones((0, 3)))


def test_float32_reductions_keep_float32(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    for op in (mf.sum, mf.mean, mf.max, mf.logsumexp):
        assert mf.gradient(lambda x: mf.sum(op(x, axis=1)), x)[0].dtype == np.float32


def test_numbers_and_lists_are_accepted():
    assert float(mf.sum([[1.0, 2.0], [3.0, 4.0]])) == 10.0
    assert float(mf.mean(3.0)) == 3.0
    np.testing.assert_array_equal(mf.reshape([1.0, 2.0], (2, 1)), [[1.0], [2.0]])
