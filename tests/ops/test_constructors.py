"""zeros, ones, full, the _like forms, arange and one_hot: values, dtypes, devices and errors."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_float_constructors_default_to_the_default_dtype():
    assert mf.zeros((2, 3)).dtype == mf.default_dtype()
    assert mf.ones(4).dtype == mf.default_dtype()
    assert mf.full(2, 0.5).dtype == mf.default_dtype()
    assert mf.arange(0.0, 1.0, 0.5).dtype == mf.default_dtype()
    mf.set_default_dtype(np.float64)
    try:
        assert mf.zeros(1).dtype == np.float64
    finally:
        mf.set_default_dtype(np.float32)


def test_constructors_match_numpy():
    np.testing.assert_array_equal(mf.zeros((2, 3), np.float64), np.zeros((2, 3)))
    np.testing.assert_array_equal(mf.ones((2,), np.int32), np.ones(2, np.int32))
    np.testing.assert_array_equal(mf.full((2, 2), 7), np.full((2, 2), 7))
    assert mf.full(3, 7).dtype == np.int64 and mf.full(1, True).dtype == bool
    np.testing.assert_array_equal(mf.arange(5), np.arange(5))
    np.testing.assert_array_equal(mf.arange(2, 10, 3), np.arange(2, 10, 3))
    np.testing.assert_allclose(mf.arange(0.0, 1.0, 0.1, dtype=np.float64), np.arange(0.0, 1.0, 0.1))


def test_float32_arange_rounds_each_value_once():
    got = mf.arange(0.0, 100.0, 0.1, dtype=np.float32)
    np.testing.assert_array_equal(got, np.arange(0.0, 100.0, 0.1).astype(np.float32))


def test_like_forms_copy_shape_dtype_and_take_tensors():
    x = np.ones((2, 3), np.float32)
    for got, fill in ((mf.zeros_like(x), 0), (mf.ones_like(x), 1), (mf.full_like(x, 4), 4)):
        assert got.shape == (2, 3) and got.dtype == np.float32 and (got == fill).all()
    assert mf.zeros_like(mf.Tensor(x), dtype=np.int8).dtype == np.int8
    assert mf.zeros((2,), like=mf.Tensor(x)).shape == (2,)


def test_constructors_inside_a_gradient_are_constants():
    def f(x):
        return mf.sum(x * mf.ones_like(x) + mf.zeros_like(x))
    np.testing.assert_array_equal(mf.gradient(f, np.zeros(3))[0], np.ones(3))


def test_bad_shapes_and_steps_are_errors():
    with pytest.raises(ValueError, match="non-negative"):
        mf.zeros((2, -1))
    with pytest.raises(ValueError, match="step"):
        mf.arange(0, 3, 0)


def test_one_hot_matches_an_identity_lookup():
    idx = np.array([[0, 2], [1, 1]])
    got = mf.one_hot(idx, 3)
    np.testing.assert_array_equal(got, np.eye(3, dtype=np.float32)[idx])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(mf.one_hot(idx, 3, axis=0), np.moveaxis(np.eye(3)[idx], -1, 0))
    assert mf.one_hot(idx, 3, dtype=np.int8).dtype == np.int8


def test_one_hot_rejects_out_of_range_and_float_indices():
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        mf.one_hot(np.array([3]), 3)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        mf.one_hot(np.array([-1]), 3)
    with pytest.raises(TypeError, match="integers"):
        mf.one_hot(np.array([1.0]), 3)
