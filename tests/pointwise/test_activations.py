"""Activation primitives: values against independent numpy formulas, gradients against float64 finite
differences, on arrays, on the tape and inside compiled scalar functions, in both float types."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

X = np.array([-3.0, -1.2, -0.3, 0.4, 1.1, 2.5])
ERF = np.vectorize(math.erf)

REFERENCE = {
    "gelu": lambda x: 0.5 * x * (1 + ERF(x / np.sqrt(2))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "elu": lambda x: np.where(x > 0, x, np.expm1(x)),
    "leaky_relu": lambda x: np.where(x > 0, x, 0.01 * x),
    "log_sigmoid": lambda x: -np.logaddexp(0, -x),
    "square": lambda x: x ** 2,
    "erf": ERF,
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
# float32 on numba (the vectorisable float32 math); float64's numba kernels in the gradient test below
@pytest.mark.parametrize("dtype", [pytest.param(np.float64, marks=pytest.mark.numpy_kernels), np.float32])
def test_values_match_independent_formulas(name, dtype):
    x = X.astype(dtype)
    out = getattr(mf, name)(x)
    assert out.dtype == dtype
    np.testing.assert_allclose(out, REFERENCE[name](X), rtol=2e-6 if dtype == np.float32 else 1e-13, atol=1e-7)


@pytest.mark.parametrize("backend", [pytest.param("numba", marks=pytest.mark.slow), "numpy"], indirect=True)
@pytest.mark.parametrize("name", sorted(REFERENCE) + ["rsqrt"])
def test_gradients_match_finite_differences(name, backend):
    x = np.abs(X) + 0.1 if name == "rsqrt" else X
    check_grad(lambda x: mf.sum(getattr(mf, name)(x) * np.linspace(0.5, 1.5, x.size)), x)


def test_two_argument_activations():
    a, b = X, X[::-1] * 0.5
    np.testing.assert_allclose(mf.logaddexp(a, b), np.logaddexp(a, b), rtol=1e-13)
    check_grad(lambda a, b: mf.sum(mf.logaddexp(a, b)), a, b)
    np.testing.assert_allclose(mf.elu(X, 0.5), np.where(X > 0, X, 0.5 * np.expm1(X)), rtol=1e-13)
    np.testing.assert_allclose(mf.leaky_relu(X, 0.2), np.where(X > 0, X, 0.2 * X), rtol=1e-13)
    check_grad(lambda x: mf.sum(mf.elu(x, 0.5) + mf.leaky_relu(x, 0.2)), X)
    assert float(mf.logaddexp(np.array(1000.0), 1000.0)) == pytest.approx(1000 + math.log(2))


def compound(v):
    return mf.gelu(v) + mf.silu(v) * mf.elu(v, 0.5) + mf.leaky_relu(v, 0.1) + math.erf(v) + mf.square(v)


@pytest.mark.parametrize("mode", ["auto", "mixed", "reverse"])
def test_activations_inside_a_scalar_function(mode):
    expected = (REFERENCE["gelu"](X) + REFERENCE["silu"](X) * np.where(X > 0, X, 0.5 * np.expm1(X))
                + np.where(X > 0, X, 0.1 * X) + ERF(X) + X ** 2)
    np.testing.assert_allclose(mf.broadcast(compound, X, mode=mode), expected, rtol=1e-12)
    check_grad(lambda x: mf.sum(mf.broadcast(compound, x, mode=mode)), X)


def test_a_parameter_must_be_passed_inside_a_scalar_function():
    def missing_alpha(v):
        return mf.elu(v)

    with pytest.raises(mf.CompileError, match="takes 2 argument"):
        mf.broadcast(missing_alpha, X)
