"""The input gradients of products by one small tracked weight share one contiguous transpose."""
from __future__ import annotations

import gc

import numpy as np
import pytest

import minflux as mf
from minflux.testing import assert_product_close
from minflux.ops import _shared_transpose


def recurrence(w, h0, xs):
    h = h0
    for x in xs:
        h = mf.tanh(h @ w + x)
    return mf.sum(h * h)


def expected_gradients(w, h0, xs):
    """Backpropagation through the recurrence written out in float64 numpy."""
    hs = [h0]
    for x in xs:
        hs.append(np.tanh(hs[-1] @ w + x))
    g_h, g_w = 2 * hs[-1], np.zeros_like(w)
    for t in range(len(xs), 0, -1):
        g_pre = g_h * (1 - hs[t] ** 2)
        g_w += hs[t - 1].T @ g_pre
        g_h = g_pre @ w.T
    return g_w, g_h


@pytest.fixture
def copies(monkeypatch):
    made = []
    real = _shared_transpose.SharedTranspose.get

    def counting(self):
        before = self.copy
        out = real(self)
        if self.copy is not None and before is None:
            made.append(out.shape)
        return out

    monkeypatch.setattr(_shared_transpose.SharedTranspose, "get", counting)
    return made


def test_a_weight_used_at_every_step_is_transposed_once(copies):
    rng = np.random.default_rng(0)
    w, h0 = rng.standard_normal((6, 6)) * 0.5, rng.standard_normal((4, 6))
    xs = list(rng.standard_normal((5, 4, 6)))
    g_w, g_h0 = mf.gradient(lambda w, h0: recurrence(w, h0, xs), w, h0)
    want_w, want_h0 = expected_gradients(w, h0, xs)
    np.testing.assert_allclose(g_w, want_w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g_h0, want_h0, rtol=1e-12, atol=1e-12)
    assert copies == [(6, 6)]


def test_a_weight_used_once_or_too_large_is_read_through_the_transposed_view(copies, monkeypatch):
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((6, 6)), rng.standard_normal((4, 6))
    (g,) = mf.gradient(lambda x: mf.sum(mf.tanh(x @ w)), x)            # w untracked: never shared
    mf.gradient(lambda w: mf.sum(mf.tanh(x @ w)), w)                     # tracked, used once
    monkeypatch.setattr(_shared_transpose, "CONTIGUOUS_MAX_BYTES", w.nbytes - 1)
    mf.gradient(lambda w, h0: recurrence(w, h0, [x, x, x]), w, x)        # too large
    assert copies == []
    d = 1 - np.tanh(x @ w) ** 2       # its operand, computed here and in the kernel a few ulps apart
    eps = np.finfo(np.float64).eps
    assert_product_close(g, d @ w.T, d, w.T,
                         operand_rtol=2 * (6 * eps) * float(np.max(np.abs(x) @ np.abs(w))) + 8 * eps)


def test_holders_go_with_their_tensors_when_gradient_returns():
    """Freed by reference counting alone: no holder (or copy) outlives the gradient call."""
    rng = np.random.default_rng(2)
    w, h0 = rng.standard_normal((6, 6)), rng.standard_normal((4, 6))
    gc.collect()
    gc.disable()
    try:
        mf.gradient(lambda w, h0: recurrence(w, h0, [h0, h0]), w, h0)
        assert _shared_transpose._holders == {}
    finally:
        gc.enable()
