"""Weight gradients of matrix products kept as factors (`ProductGradient`) and formed as one stacked
product: the same gradients as the textbook sum over steps, whatever else the weight meets."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
import minflux.product_gradient as product_gradient
from minflux.product_gradient import ProductGradient
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def recurrence(W, U, xs, h0):
    """``h_t = tanh(x_t W + h_{t-1} U)`` and the loss ``sum_t sum(h_t ** 2)``: ``W`` and ``U`` get one
    product gradient per step."""
    h, loss = h0, 0.0
    for x in xs:
        h = mf.tanh(x @ W + h @ U)
        loss = loss + mf.sum(h * h)
    return loss


def textbook_gradients(W, U, xs, h0):
    """Backpropagation through time written out with numpy, one outer product per step."""
    hs, h = [h0], h0
    for x in xs:
        h = np.tanh(x @ W + h @ U)
        hs.append(h)
    gW, gU, carry = np.zeros_like(W), np.zeros_like(U), np.zeros_like(h0)
    for t in range(len(xs), 0, -1):
        g_pre = (2 * hs[t] + carry) * (1 - hs[t] ** 2)
        gW += xs[t - 1].T @ g_pre
        gU += hs[t - 1].T @ g_pre
        carry = g_pre @ U.T
    return gW, gU


@pytest.fixture
def case(rng):
    return (rng.standard_normal((3, 4)) * 0.5, rng.standard_normal((4, 4)) * 0.5,
            [rng.standard_normal((5, 3)) for _ in range(6)], rng.standard_normal((5, 4)))


def test_recurrent_weight_gradients_match_backpropagation_through_time(case):
    W, U, xs, h0 = case
    gW, gU = mf.gradient(lambda W, U: recurrence(W, U, xs, h0), W, U)
    expected_W, expected_U = textbook_gradients(W, U, xs, h0)
    np.testing.assert_allclose(gW, expected_W, rtol=1e-12)
    np.testing.assert_allclose(gU, expected_U, rtol=1e-12)
    check_grad(lambda W, U: recurrence(W, U, xs, h0), W, U)


def test_pending_factors_are_formed_in_chunks(case, monkeypatch):
    monkeypatch.setattr(product_gradient, "FLUSH_BYTES", 300)  # a flush every step or two
    products = []
    stacked = product_gradient._stacked_product
    monkeypatch.setattr(product_gradient, "_stacked_product", lambda a, g: products.append(len(a)) or stacked(a, g))
    W, U, xs, h0 = case
    gW, gU = mf.gradient(lambda W, U: recurrence(W, U, xs, h0), W, U)
    assert len(products) > 2 and max(products) < len(xs)  # several chunks per weight, none of all steps
    expected_W, expected_U = textbook_gradients(W, U, xs, h0)
    np.testing.assert_allclose(gW, expected_W, rtol=1e-12)
    np.testing.assert_allclose(gU, expected_U, rtol=1e-12)


def test_a_weight_that_also_meets_elementwise_ops_and_a_computed_weight(case):
    W, U, xs, h0 = case

    def loss(W, U):
        decay = mf.sum(U * U)                      # a dense gradient before and after the products
        return recurrence(W, U * 1.5, xs, h0) + decay + mf.sum(mf.tanh(U))

    check_grad(loss, W, U)


def test_a_tied_weight_is_one_leaf_whose_products_accumulate():
    W = np.eye(3)
    model = {"first": W, "second": W}
    x = np.arange(6.0).reshape(2, 3)
    (g,) = mf.gradient(lambda m: mf.sum(x @ m["first"]) + mf.sum(x @ m["second"]), model)
    np.testing.assert_allclose(g["first"], 2 * x.T @ np.ones((2, 3)))
    assert g["second"] is g["first"]


def test_mixed_precision_factors_promote_like_the_dense_product(rng):
    a32, g64 = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 2))
    p = ProductGradient(a32, g64)
    p.add(ProductGradient(a32, g64))
    np.testing.assert_allclose(p.dense(), 2 * a32.T @ g64, rtol=1e-6)
    assert p.dense().dtype == np.float64
