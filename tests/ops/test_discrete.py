"""isnan, isfinite, any, all (boolean constants) and round, ceil (zero gradient)."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_tests_match_numpy():
    x = np.array([[1.0, np.nan, np.inf], [0.0, -np.inf, 2.0]])
    np.testing.assert_array_equal(mf.isnan(x), np.isnan(x))
    np.testing.assert_array_equal(mf.isfinite(x), np.isfinite(x))
    for axis in (None, 0, 1, (0, 1)):
        np.testing.assert_array_equal(mf.any(x == 0, axis=axis), np.any(x == 0, axis=axis))
        np.testing.assert_array_equal(mf.all(x != 0, axis=axis, keepdims=True),
                                      np.all(x != 0, axis=axis, keepdims=True))


def test_tests_on_tracked_values_are_untracked_booleans():
    seen = []

    def f(x):
        flags = mf.isfinite(x)
        seen.append(flags)
        return mf.sum(mf.where(flags, x, 0.0))
    g, = mf.gradient(f, np.array([1.0, np.inf, 3.0]))
    np.testing.assert_array_equal(g, [1.0, 0.0, 1.0])
    assert seen[0]._tape is None and seen[0].dtype == bool


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_and_ceil_match_numpy_with_zero_gradient(dtype):
    x = np.array([-2.5, -1.5, -0.2, 0.5, 1.5, 2.49, 3.7], dtype)
    np.testing.assert_array_equal(mf.round(x), np.round(x))
    np.testing.assert_array_equal(mf.round(x, 1), np.round(x, 1))
    np.testing.assert_array_equal(mf.ceil(x), np.ceil(x))
    for op in (mf.round, mf.ceil):
        assert op(x).dtype == dtype
        g, = mf.gradient(lambda x: mf.sum(op(x) * x), x)
        np.testing.assert_array_equal(g, op(x))  # d/dx (op(x) * x) = op(x) + 0 * x
