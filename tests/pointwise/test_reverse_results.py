"""Reverse mode returns new arrays, never an input or one result twice."""
import numpy as np
import pytest

import minflux as mf


@pytest.mark.parametrize("mode", ["mixed", "reverse"])
def test_returning_an_argument_gives_a_new_array(mode):
    a = np.ones(3)
    out = mf.broadcast(lambda x: x, a, mode=mode)
    assert not np.shares_memory(out, a)
    out[0] = 5.0
    np.testing.assert_array_equal(a, [1.0, 1.0, 1.0])
    first, second = mf.broadcast(lambda x: (x, x), a, mode=mode)
    assert not np.shares_memory(first, second) and not np.shares_memory(first, a)


@pytest.mark.parametrize("mode", ["mixed", "reverse"])
def test_returning_a_tracked_argument_gives_a_new_tensor(mode):
    a = np.array([1.0, 2.0])

    def loss(x):
        y = mf.broadcast(lambda u: u, x, mode=mode)
        assert y is not x and not np.shares_memory(y.value, x.value)
        return mf.sum(y * y)
    np.testing.assert_allclose(mf.gradient(loss, a)[0], 2 * a)


def branchy(x, y):
    if x > 100:
        return x * y
    return 0.0


def doubled_below_zero(x):
    return x if x > 0 else 2.0 * x


@pytest.mark.parametrize("mode", ["auto", "mixed", "adjoint", "reverse"])
def test_branches_no_lane_takes_give_the_gradient_every_mode_gives(mode):
    """A branch no lane takes (every branch, for a zero-size input) runs no op in reverse mode; the
    result still depends on the inputs, so each gets the zeros the kernel modes give."""
    for n in (3, 0):
        x, y = np.ones(n), np.full(n, 2.0)
        value, (gx, gy) = mf.withgradient(lambda x, y: mf.sum(mf.broadcast(branchy, x, y, mode=mode)), x, y)
        assert float(value) == 0.0
        np.testing.assert_array_equal(gx, np.zeros(n))
        np.testing.assert_array_equal(gy, np.zeros(n))
    (g,) = mf.gradient(lambda x: mf.sum(mf.broadcast(doubled_below_zero, x, mode=mode)), np.ones(0))
    assert g.shape == (0,)


@pytest.mark.parametrize("mode", ["mixed", "reverse"])
def test_a_constant_result_of_a_tracked_call_is_an_untracked_tensor(mode):
    def loss(x):
        out = mf.broadcast(lambda u: 2.0, x, mode=mode)
        assert isinstance(out, mf.Tensor) and out._tape is None
        return mf.sum(x * 1.0) + mf.sum(out)
    np.testing.assert_array_equal(mf.gradient(loss, np.ones(2))[0], [1.0, 1.0])


def tanh_and_product(a, b):
    return mf.tanh(a), a * b + mf.exp(a * a)


@pytest.mark.parametrize("mode", ["auto", "mixed", "adjoint", "reverse"])
def test_a_float32_argument_of_a_float64_call_computes_in_float64_in_every_mode(mode):
    """The float type of a call is numpy's promotion of its float arguments: each mode computes a
    float32 argument's part in float64, inside a gradient as outside one."""
    x, y = np.array([0.5, -1.5, 0.3], np.float32), np.array([2.0, 3.0, 0.7])
    seen = []

    def loss(x, y):
        u, v = mf.broadcast(tanh_and_product, x, y, mode=mode)
        seen.append((u.dtype, v.dtype))
        return mf.sum(u) + mf.sum(v * v)

    gx, gy = mf.gradient(loss, x, y)
    assert seen == [(np.float64, np.float64)]
    assert (gx.dtype, gy.dtype) == (np.float32, np.float64)   # each argument's own dtype
    x64 = x.astype(np.float64)
    v = x64 * y + np.exp(x64 * x64)
    np.testing.assert_allclose(gy, 2.0 * v * x64, rtol=1e-15)   # float64 precision, not float32's
    expected_gx = (1.0 - np.tanh(x64) ** 2) + 2.0 * v * (y + 2.0 * x64 * np.exp(x64 * x64))
    np.testing.assert_allclose(gx, expected_gx.astype(np.float32), rtol=1e-6)
