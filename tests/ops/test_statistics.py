"""var, std, prod, cumsum, argmax, argmin against numpy and finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

AXES = [((5,), None), ((3, 4), 0), ((3, 4), 1), ((3, 4), (0, 1)), ((2, 3, 4), (0, 2)), ((2, 3, 4), -1)]


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", AXES, ids=str)
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_and_std_match_numpy_and_finite_differences(name, shape, axis, keepdims, ddof, rng):
    x = rng.standard_normal(shape)
    want = getattr(np, name)(x, axis=axis, ddof=ddof, keepdims=keepdims)
    got = getattr(mf, name)(x, axis=axis, ddof=ddof, keepdims=keepdims)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    weights = rng.standard_normal(np.shape(want))
    check_grad(lambda x: mf.sum(getattr(mf, name)(x, axis=axis, ddof=ddof, keepdims=keepdims) * weights), x)


def test_var_gradient_is_the_textbook_formula(rng):
    x = rng.standard_normal(6)
    g, = mf.gradient(lambda x: mf.var(x, ddof=1), x)
    np.testing.assert_allclose(g, 2 * (x - x.mean()) / 5, rtol=1e-12)


def test_std_of_constant_rows_has_zero_gradient():
    g, = mf.gradient(lambda x: mf.sum(mf.std(x, axis=1)), np.array([[1.0, 1.0], [1.0, 3.0]]))
    np.testing.assert_allclose(g, [[0.0, 0.0], [-0.5, 0.5]])


def test_var_without_degrees_of_freedom_is_an_error():
    with pytest.raises(ValueError, match="ddof=1"):
        mf.var(np.ones(1), ddof=1)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape,axis", AXES, ids=str)
def test_prod_matches_numpy_and_finite_differences(shape, axis, keepdims, rng):
    x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
    want = np.prod(x, axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(mf.prod(x, axis=axis, keepdims=keepdims), want, rtol=1e-12)
    weights = rng.standard_normal(np.shape(want))
    check_grad(lambda x: mf.sum(mf.prod(x, axis=axis, keepdims=keepdims) * weights), x)


def test_prod_gradient_through_zeros_is_the_product_of_the_others():
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0]])
    g, = mf.gradient(lambda x: mf.sum(mf.prod(x, axis=1)), x)
    np.testing.assert_array_equal(g, [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    check_grad(lambda x: mf.sum(mf.prod(x, axis=1)), x)


@pytest.mark.parametrize("shape,axis", [((5,), None), ((3, 4), None), ((3, 4), 0), ((3, 4), -1),
                                        ((2, 3, 4), 1)], ids=str)
def test_cumsum_matches_numpy_and_finite_differences(shape, axis, rng):
    x = rng.standard_normal(shape)
    want = np.cumsum(x, axis=axis)
    np.testing.assert_allclose(mf.cumsum(x, axis=axis), want, rtol=1e-12)
    weights = rng.standard_normal(want.shape)
    check_grad(lambda x: mf.sum(mf.cumsum(x, axis=axis) * weights), x)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True), (-1, False)])
def test_argmax_and_argmin_match_numpy(name, axis, keepdims, rng):
    x = rng.integers(0, 4, (3, 5)).astype(float)   # ties: the first one wins, as in numpy
    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    got = getattr(mf, name)(x, axis=axis, keepdims=keepdims)
    np.testing.assert_array_equal(got, want)
    assert np.shape(got) == np.shape(want)


def test_argmax_inside_a_gradient_is_a_constant():
    def f(x):
        i = mf.argmax(x)
        assert not isinstance(i, mf.Tensor) or i._tape is None
        return mf.sum(x * float(i))
    np.testing.assert_array_equal(mf.gradient(f, np.array([1.0, 3.0, 2.0]))[0], [1.0, 1.0, 1.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_statistics_keep_the_dtype(dtype):
    x = np.arange(1, 7, dtype=dtype).reshape(2, 3)
    for op in (mf.var, mf.std, mf.prod, mf.cumsum):
        assert op(x).dtype == dtype
        assert mf.gradient(lambda x: mf.sum(op(x)), x)[0].dtype == dtype
