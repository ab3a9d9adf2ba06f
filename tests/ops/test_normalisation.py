"""mf.layer_norm: values against the textbook formula in numpy, gradients against float64 finite
differences, and the affine parameters' gradients against their closed forms."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad


def textbook(x, scale, shift, eps):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + shift


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5)], ids=str)
def test_values_and_gradients(shape, rng):
    x, scale, shift = rng.standard_normal(shape), rng.standard_normal(5), rng.standard_normal(5)
    np.testing.assert_allclose(mf.layer_norm(x, scale, shift, 1e-3), textbook(x, scale, shift, 1e-3),
                               rtol=1e-12)
    weights = rng.standard_normal(shape)
    check_grad(lambda x, scale, shift: mf.sum(mf.layer_norm(x, scale, shift, 1e-3) * weights), x, scale, shift)


def test_without_affine_parameters(rng):
    x = rng.standard_normal((4, 6))
    np.testing.assert_allclose(mf.layer_norm(x), textbook(x, 1.0, 0.0, 1e-5), rtol=1e-12)
    weights = rng.standard_normal((4, 6))
    check_grad(lambda x: mf.sum(mf.layer_norm(x) * weights), x)


def test_affine_gradients_are_the_column_sums(rng):
    x, g = rng.standard_normal((7, 3)), rng.standard_normal((7, 3))
    normalised = textbook(x, 1.0, 0.0, 1e-5)
    g_scale, g_shift = mf.gradient(lambda s, b: mf.sum(mf.layer_norm(x, s, b) * g), np.ones(3), np.zeros(3))
    np.testing.assert_allclose(g_scale, (g * normalised).sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(g_shift, g.sum(axis=0), rtol=1e-12)


def test_float32_stays_float32(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    out = mf.layer_norm(x, np.ones(4, np.float32), np.zeros(4, np.float32))
    assert out.dtype == np.float32
    g, = mf.gradient(lambda x: mf.sum(mf.layer_norm(x) ** 3), x)
    assert g.dtype == np.float32


def test_a_number_has_no_axis_to_normalise():
    with pytest.raises(ValueError, match="at least one axis"):
        mf.layer_norm(np.float64(2.0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_row_kernels_agree_with_the_array_formula(dtype, rng):
    """Parameters of shape (C,) take the compiled row kernels, (1, C) the array formula."""
    from minflux.ops import normalisation

    x, g = rng.standard_normal((2, 6, 5)).astype(dtype), rng.standard_normal((2, 6, 5)).astype(dtype)
    scale, shift = rng.standard_normal(5).astype(dtype), rng.standard_normal(5).astype(dtype)
    assert normalisation._compiled_rows(x, scale, shift)
    assert not normalisation._compiled_rows(x, scale[None], shift[None])
    results = []
    for s, b in [(scale, shift), (scale[None], shift[None])]:
        out = mf.layer_norm(x, s, b)
        grads = mf.gradient(lambda x, s, b: mf.sum(mf.layer_norm(x, s, b) * g), x, s, b)
        results.append([out, grads[0], grads[1].reshape(5), grads[2].reshape(5)])
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for kernel, formula in zip(*results):
        assert kernel.dtype == dtype
        np.testing.assert_allclose(kernel, formula, rtol=tolerance, atol=tolerance)


def test_infinities_propagate_through_the_row_kernels():
    out = mf.layer_norm(np.array([[1.0, np.inf, 2.0]]), np.ones(3), np.zeros(3))
    assert np.isnan(out).all()
