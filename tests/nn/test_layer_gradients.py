"""Every layer's gradients against central finite differences in float64 (minflux.testing.check_grad)."""
import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def rng():
    return np.random.default_rng(7)


def data(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("activation", [None, mf.tanh, mf.sigmoid])
@pytest.mark.parametrize("batch", [(5,), (2, 3)])
def test_dense(activation, batch):
    layer = mf.nn.Dense(4, 3, activation, rng=rng())
    check_grad(lambda m, x: mf.sum(m(x) ** 2), layer, data(*batch, 4))


def test_dense_without_bias():
    layer = mf.nn.Dense(4, 3, rng=rng(), bias=False)
    check_grad(lambda m, x: mf.sum(mf.tanh(m(x))), layer, data(3, 4))


def test_embedding_with_repeated_ids():
    emb = mf.nn.Embedding(6, 3, rng=rng())
    ids = np.array([[0, 2, 2], [5, 2, 0]])
    weights = data(2, 3, 3)
    check_grad(lambda m: mf.sum(m(ids) * weights), emb)


@pytest.mark.parametrize("affine", [True, False])
def test_layernorm(affine):
    norm = mf.nn.LayerNorm(5, affine=affine)
    if affine:
        norm.scale = 1 + 0.3 * data(5, seed=3)
        norm.shift = data(5, seed=4)
    weights = data(3, 5, seed=5)
    check_grad(lambda m, x: mf.sum(m(x) * weights), norm, data(3, 5))


def test_dropout_active_with_a_fixed_mask():
    weights = data(4, 6, seed=2)

    def loss(x):  # a fresh generator per call: the same mask in every evaluation
        drop = mf.nn.Dropout(0.4, rng=np.random.default_rng(3), active=True)
        return mf.sum(drop(x) * weights)

    check_grad(loss, data(4, 6))


def test_chain():
    r = rng()
    model = mf.nn.Chain(mf.nn.Dense(3, 5, mf.tanh, rng=r), mf.nn.LayerNorm(5), mf.nn.Dense(5, 2, rng=r))
    check_grad(lambda m, x: mf.sum(m(x) ** 2), model, data(4, 3))


def test_lstm_cell_parameters_input_and_state():
    cell = mf.nn.LSTMCell(3, 4, rng=rng(), forget_bias=1.0)
    cell.b = cell.b + 0.1 * data(16, seed=9)
    x, h, c = data(2, 3), data(2, 4, seed=2), data(2, 4, seed=3)
    weights = data(2, 4, seed=4)

    def loss(m, x, h, c):
        h1, (_, c1) = m(x, (h, c))
        return mf.sum(h1 * weights) + mf.sum(c1 * c1)

    check_grad(loss, cell, x, h, c)


def test_recurrence_through_time():
    rnn = mf.nn.Recurrence(mf.nn.LSTMCell(2, 3, rng=rng()))
    xs = data(4, 2, 2)

    def loss(m, xs):
        outputs, (h, c) = m(xs)
        return sum(mf.sum(y * (k + 1)) for k, y in enumerate(outputs)) + mf.sum(c)

    check_grad(loss, rnn, xs)


def test_a_custom_plain_class_in_three_lines():
    class Scale:
        def __init__(self):
            self.s = np.array([0.5, -2.0])

        def __call__(self, x):
            return x * self.s

    check_grad(lambda m, x: mf.sum(mf.tanh(m(x))), Scale(), data(3, 2))
