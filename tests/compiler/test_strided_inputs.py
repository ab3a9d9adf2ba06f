"""Inputs that are views of other arrays: rows read in place through a row stride, others copied."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import numba_backend
from minflux.compiler.layout import plan_layout, row_stride
from minflux.testing import check_grad


def f(x, y):
    return mf.tanh(x) * y + x if y > 0 else x * x - y


def f_numpy(x, y):
    return np.where(y > 0, np.tanh(x) * y + x, x * x - y)


def f_partials(x, y):
    """d f / d x and d f / d y, written out by hand."""
    t = np.tanh(x)
    return np.where(y > 0, (1 - t * t) * y + 1, 2 * x), np.where(y > 0, t, -1.0)


rng = np.random.default_rng(0)
WIDE = rng.standard_normal((6, 11))
BASE3 = rng.standard_normal((3, 4, 9))
VIEWS = {
    "column slice": (lambda: WIDE[:, :5], (6, 5)),
    "every other row": (lambda: WIDE[::2, 3:8], (3, 5)),
    "transpose": (lambda: WIDE[:5, :6].T, (6, 5)),
    "reversed rows": (lambda: WIDE[::-1, :5], (6, 5)),
    "broadcast row": (lambda: np.broadcast_to(WIDE[0, :5], (6, 5)), (6, 5)),
    "broadcast column": (lambda: np.broadcast_to(WIDE[:, :1], (6, 5)), (6, 5)),
    "3-d slice of the last axis": (lambda: BASE3[:, :, 2:7], (3, 4, 5)),
    "3-d slice of the middle axis": (lambda: BASE3[:, 1:3, :], (3, 2, 9)),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_values_and_partials_on_views_agree_with_numpy(name):
    make, shape = VIEWS[name]
    x = make()
    assert x.shape == shape and not x.flags.c_contiguous
    y = np.random.default_rng(1).standard_normal(shape)
    for args in ((x, y), (y, x)):
        out = mf.broadcast(f, *args)
        np.testing.assert_allclose(out, f_numpy(*args), rtol=1e-13, atol=1e-15)
        gx, gy = mf.gradient(lambda a, b: mf.sum(mf.broadcast(f, a, b)), *args)
        want_x, want_y = f_partials(*(np.asarray(a) for a in args))
        np.testing.assert_allclose(gx, want_x, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(gy, want_y, rtol=1e-12, atol=1e-14)


def test_float32_views_with_a_per_row_control():
    x = rng.standard_normal((40, 70)).astype(np.float32)[:, 3:35]
    c = rng.standard_normal((40, 70)).astype(np.float32)[:, 40:41]     # (40, 1), not contiguous
    out = mf.broadcast(f, x, c)
    np.testing.assert_allclose(out, f_numpy(x.astype(np.float64), c.astype(np.float64)), rtol=2e-6, atol=1e-6)


def test_gradient_through_tensor_slices_matches_finite_differences():
    w, v = rng.standard_normal((5, 9)), rng.standard_normal((7, 5))
    check_grad(lambda w, v: mf.sum(mf.broadcast(f, w[:, 2:7], v[:5].T) ** 2), w, v)
    check_grad(lambda w: mf.sum(mf.broadcast(f, w[:, :4], w[:, 5:])), w)


def test_row_strided_inputs_are_read_in_place(monkeypatch):
    copies = []
    real = np.ascontiguousarray

    def counting(a, *args, **kwargs):
        if np.shares_memory(a, wide):
            copies.append(np.shape(a))
        return real(a, *args, **kwargs)

    monkeypatch.setattr(numba_backend.np, "ascontiguousarray", counting)
    wide = rng.standard_normal((64, 200)).astype(np.float32)
    x, y = wide[:, 10:138], np.ones((64, 128), np.float32)
    layout = plan_layout([x, y], x.shape)
    assert np.shares_memory(layout.flats[0], wide) and layout.strides == (200, 128)
    out = mf.broadcast(f, x, y)
    grads = mf.gradient(lambda x, y: mf.sum(mf.broadcast(f, x, y)), x, y)
    assert copies == []
    np.testing.assert_allclose(out, f_numpy(x, y), rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(grads[0], f_partials(x, y)[0], rtol=2e-5, atol=1e-6)
    mf.broadcast(f, wide[:, :64].T, wide[:, 100:164])       # the transpose is copied, the slice is not
    assert copies == [(64, 64)]


def test_row_stride():
    a = np.zeros((4, 6, 8), np.float32)
    assert row_stride(a[:, :, :5], 5) == 8
    assert row_stride(a[:, 2:4, :], 16) == 48          # two rows of 8 per block, blocks 48 apart
    assert row_stride(a[:, 2:4, :], 8) is None         # rows not equally spaced
    assert row_stride(a[1:3, :, :], 8) == 8
    assert row_stride(a[:, :, ::2], 4) is None         # rows not contiguous
    assert row_stride(a[::-1], 8) is None              # backwards
    assert row_stride(np.broadcast_to(a[0, 0], (5, 8)), 8) == 0
