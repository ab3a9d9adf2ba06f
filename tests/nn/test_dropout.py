"""Dropout: active only while a gradient is recorded (unless overridden), reproducible from its rng."""
import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_identity_outside_a_gradient_computation():
    drop = mf.nn.Dropout(0.5, rng=0)
    x = np.ones((3, 4), np.float32)
    assert drop(x) is x


def test_active_inside_a_gradient_computation():
    drop = mf.nn.Dropout(0.5, rng=np.random.default_rng(0))
    x = np.ones((50, 40))
    (g,) = mf.gradient(lambda x: mf.sum(drop(x)), x)
    kept = g != 0
    assert set(np.unique(g)) == {0.0, 2.0}  # scaled by 1 / (1 - p)
    assert 0.4 < kept.mean() < 0.6


def test_override_off_inside_gradient_and_on_outside():
    x = np.ones(1000)
    off = mf.nn.Dropout(0.5, rng=0, active=False)
    (g,) = mf.gradient(lambda x: mf.sum(off(x)), x)
    np.testing.assert_array_equal(g, np.ones(1000))
    on = mf.nn.Dropout(0.25, rng=0, active=True)
    y = on(x)
    assert set(np.unique(y)) == {0.0, np.float64(1 / 0.75)}


def test_masks_come_from_the_generator():
    x = np.ones(20, np.float32)
    a = mf.nn.Dropout(0.5, rng=np.random.default_rng(3), active=True)
    b = mf.nn.Dropout(0.5, rng=np.random.default_rng(3), active=True)
    first = a(x)
    np.testing.assert_array_equal(first, b(x))
    np.testing.assert_array_equal(first, (np.random.default_rng(3).random(20) >= 0.5) * 2.0)
    assert not np.array_equal(first, a(x))  # the generator advances


def test_invalid_probability():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        mf.nn.Dropout(1.0, rng=0)
