"""Dividing by a zero number computes as numpy does -- inf or nan, warned about or raised as numpy's
error state says (which `mf.gradient` turns off while it runs) -- for the value and for the gradient,
in every way an elementwise op is evaluated: op by op on the tape, fused, and in each mode of
`mf.broadcast`."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minflux as mf

X = np.array([1.0, -2.0, 0.0, 3.0])
WAYS = ("op by op", "fused", "auto", "mixed", "adjoint", "reverse")


def loss_and_gradient(way: str, fn, x):
    """(the value of ``fn(x)``, the gradient of its sum) evaluated the way ``way`` names."""
    if way in ("auto", "mixed", "adjoint", "reverse"):
        out = lambda x: mf.broadcast(fn, x, mode=way)
        settings = {"enabled": False}
    else:
        out = fn
        settings = {"enabled": False} if way == "op by op" else {"compile_after": 1, "min_elements": 1}
    with mf.fusion(**settings):
        (_, value), (g,) = mf.withgradient(lambda x: (mf.sum(out(x)), out(x)), x)
    return mf.to_numpy(value), g


def numpy_says(fn, x):
    with np.errstate(all="ignore"):
        return fn(x)


# one function per zero, each its own scalar function
OVER_ZERO = {"0.0": (lambda x: x / 0.0, 0.0), "-0.0": (lambda x: x / -0.0, -0.0), "0": (lambda x: x / 0, 0)}


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("zero", sorted(OVER_ZERO))
def test_x_over_a_zero_number_is_numpys_value_and_gradient(way, zero):
    fn, b = OVER_ZERO[zero]
    value, g = loss_and_gradient(way, fn, X)
    np.testing.assert_array_equal(value, numpy_says(fn, X))      # inf, -inf and nan
    # d(x / b)/dx = 1 / b: inf of the zero's sign at every element, whatever x is
    np.testing.assert_array_equal(g, numpy_says(lambda x: np.ones_like(x) / np.float64(b), X))


@pytest.mark.parametrize("way", WAYS)
def test_a_float32_argument_keeps_its_dtype(way):
    x = X.astype(np.float32)
    value, g = loss_and_gradient(way, lambda x: x / 0.0, x)
    expected = numpy_says(lambda x: x / 0.0, x)
    assert value.dtype == expected.dtype and g.dtype == np.float32
    np.testing.assert_array_equal(value, expected)
    np.testing.assert_array_equal(g, np.full(4, np.inf, np.float32))


def test_a_0d_argument_over_zero():
    (g,) = mf.gradient(lambda x: x / 0.0, np.array(2.0))
    assert g.shape == () and g == np.inf


def test_numpys_error_state_decides_outside_a_gradient_and_is_off_inside_one():
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        mf.divide(X, 0.0)
    with np.errstate(divide="warn", invalid="ignore"), pytest.warns(RuntimeWarning, match="divide by zero"):
        mf.divide(X, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with np.errstate(all="raise"):     # inside mf.gradient numpy's warnings are off, as documented
            value, (g,) = mf.withgradient(lambda x: mf.sum(x[:2] / 0.0), X)
    assert np.isnan(value)                  # inf + -inf
    np.testing.assert_array_equal(g, [np.inf, np.inf, 0.0, 0.0])


def test_division_by_a_nonzero_number_is_unchanged():
    (g,) = mf.gradient(lambda x: mf.sum(x / 4.0), X)
    np.testing.assert_array_equal(g, np.full(4, 0.25))
    (g,) = mf.gradient(lambda x: mf.sum(3.0 / x), X[[0, 1, 3]])
    np.testing.assert_array_equal(g, -3.0 / X[[0, 1, 3]] ** 2)
