"""trainmode / testmode across a whole model, and printing of parameter-free layers."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def model_with_dropouts(rng):
    shared = mf.nn.Dropout(0.5, rng=rng)
    return mf.nn.Chain(mf.nn.Dense(4, 4, rng=rng), shared,
                       mf.nn.SkipConnection(mf.nn.Chain(mf.nn.Dropout(0.5, rng=rng)), mf.add), shared)


def dropouts(model):
    return [model.layers[1], model.layers[2].layer.layers[0]]


def test_testmode_turns_dropout_off_inside_a_gradient(rng):
    model = model_with_dropouts(rng)
    x = np.ones((3, 4), np.float32)
    g_auto, = mf.gradient(lambda x: mf.sum(model(x)), x)
    mf.nn.testmode(model)
    assert all(d.active is False for d in dropouts(model))
    g_test, = mf.gradient(lambda x: mf.sum(model(x)), x)
    mf.nn.testmode(model, "auto")
    g_plain, = mf.gradient(lambda x: 2 * mf.sum(model.layers[0](x)), x)   # the skip doubles, no dropout
    np.testing.assert_allclose(g_test, g_plain, rtol=1e-6)
    assert not np.allclose(g_auto, g_plain)


def test_trainmode_turns_dropout_on_outside_a_gradient_and_auto_restores(rng):
    model = model_with_dropouts(rng)
    x = np.ones((3, 4), np.float32)
    plain = model(x)
    assert mf.nn.trainmode(model) is model
    assert not np.allclose(model(x), plain)
    mf.nn.trainmode(model, False)
    np.testing.assert_array_equal(model(x), plain)
    mf.nn.testmode(model, False)
    assert all(d.active is True for d in dropouts(model))
    mf.nn.trainmode(model, "auto")
    assert all(d.active is None for d in dropouts(model))


@pytest.mark.parametrize("mode", [1, 0, "eval", None])
def test_modes_other_than_true_false_auto_are_errors(mode, rng):
    with pytest.raises(ValueError, match="True, False or 'auto'"):
        mf.nn.testmode(mf.nn.Dropout(0.1, rng=rng), mode)


def test_printing_shows_parameter_free_layers(rng):
    model = mf.nn.Chain(mf.nn.Dense(2, 3, rng=rng), mf.nn.Dropout(0.25, rng=rng), mf.nn.Identity())
    text = repr(model)
    assert "layers.1 = Dropout(0.25)\n" in text
    assert "layers.2 = Identity()\n" in text
    assert text.splitlines()[0].endswith("# 9 parameters")


def test_parallel_combines_and_differentiates(rng):
    from minflux.testing import check_grad

    a, b = mf.nn.Dense(3, 2, rng=rng, dtype=np.float64), mf.nn.Dense(3, 2, mf.tanh, rng=rng, dtype=np.float64)
    par = mf.nn.Parallel(mf.add, a, b)
    x, y = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    np.testing.assert_allclose(par(x), a(x) + b(x), rtol=1e-12)
    np.testing.assert_allclose(par(x, y), a(x) + b(y), rtol=1e-12)
    pair = mf.nn.Parallel(None, a, b)(x)
    assert isinstance(pair, tuple) and len(pair) == 2
    np.testing.assert_allclose(mf.nn.Parallel(mf.multiply, a)(x, y), a(x) * a(y), rtol=1e-12)
    check_grad(lambda m, x: mf.sum(m(x, x * 2.0) ** 2), par, x)
    with pytest.raises(ValueError, match="2 layers got 3 inputs"):
        par(x, x, x)


def test_skip_connection_is_connection_of_layer_and_input(rng):
    from minflux.testing import check_grad

    layer = mf.nn.Dense(3, 3, mf.tanh, rng=rng, dtype=np.float64)
    block = mf.nn.SkipConnection(layer, mf.add)
    x = rng.standard_normal((2, 3))
    np.testing.assert_allclose(block(x), layer(x) + x, rtol=1e-12)
    check_grad(lambda m, x: mf.sum(m(x) ** 2), block, x)
    with pytest.raises(TypeError, match="not callable"):
        mf.nn.SkipConnection(layer, 3)
