"""Layer outputs against independent numpy formulas; construction and error messages."""
import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def test_dense_is_affine_then_activation():
    layer = mf.nn.Dense(3, 2, mf.tanh, rng=0)
    layer.b = np.array([0.5, -1.0], np.float32)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(layer(x), np.tanh(x @ layer.W + layer.b), rtol=1e-6)
    assert layer.W.dtype == np.float32 and layer.W.shape == (3, 2)


def test_dense_rejects_the_wrong_input_width():
    with pytest.raises(ValueError, match=r"Dense\(3 => 2\) expects inputs whose last axis has length 3"):
        mf.nn.Dense(3, 2, rng=0)(np.ones((1, 4)))


def test_layers_need_a_generator():
    with pytest.raises(TypeError, match="rng=np.random.default_rng"):
        mf.nn.Dense(3, 2, rng="seed")
    with pytest.raises(TypeError, match="rng"):
        mf.nn.Dense(3, 2)  # rng is required


def test_same_seed_same_weights_and_dtype_option():
    a = mf.nn.Dense(3, 2, rng=np.random.default_rng(5), dtype=np.float64)
    b = mf.nn.Dense(3, 2, rng=np.random.default_rng(5), dtype=np.float64)
    assert a.W.dtype == np.float64 and np.array_equal(a.W, b.W)


def test_embedding_rows_and_scatter_added_gradient():
    emb = mf.nn.Embedding(4, 2, rng=0)
    ids = np.array([3, 1, 3])
    np.testing.assert_array_equal(emb(ids), emb.W[[3, 1, 3]])
    (g,) = mf.gradient(lambda m: mf.sum(m(ids)), emb)
    np.testing.assert_array_equal(g.W, [[0, 0], [1, 1], [0, 0], [2, 2]])


def test_embedding_rejects_bad_ids():
    emb = mf.nn.Embedding(4, 2, rng=0)
    with pytest.raises(IndexError, match="got id 4, outside"):
        emb(np.array([0, 4]))
    with pytest.raises(IndexError, match="got id -1"):
        emb(np.array([-1]))
    with pytest.raises(TypeError, match="integer ids"):
        emb(np.array([0.0]))


def test_layernorm_matches_the_formula():
    norm = mf.nn.LayerNorm(4, eps=1e-3, dtype=np.float64)
    norm.scale = np.array([1.0, 2.0, 3.0, 4.0])
    norm.shift = np.array([0.0, 1.0, 0.0, -1.0])
    x = np.random.default_rng(0).standard_normal((3, 4))
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    np.testing.assert_allclose(norm(x), (x - mu) / np.sqrt(var + 1e-3) * norm.scale + norm.shift,
                               rtol=1e-12)
    assert mf.nn.LayerNorm(4, affine=False).parameter_count() == 0


def test_lstm_cell_matches_the_equations():
    cell = mf.nn.LSTMCell(3, 2, rng=0, dtype=np.float64, forget_bias=1.0)
    assert cell.Wx.shape == (3, 8) and cell.Wh.shape == (2, 8)
    np.testing.assert_array_equal(cell.b, [0, 0, 1, 1, 0, 0, 0, 0])
    for k in range(4):  # each recurrent block is orthogonal
        block = cell.Wh[:, 2 * k:2 * k + 2]
        np.testing.assert_allclose(block @ block.T, np.eye(2), atol=1e-12)
    r = np.random.default_rng(1)
    x, h, c = r.standard_normal((5, 3)), r.standard_normal((5, 2)), r.standard_normal((5, 2))
    pre = x @ cell.Wx + h @ cell.Wh + cell.b
    i, f, g, o = pre[:, 0:2], pre[:, 2:4], pre[:, 4:6], pre[:, 6:8]
    c_ref = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h_ref = sigmoid(o) * np.tanh(c_ref)
    h1, (h1_again, c1) = cell(x, (h, c))
    np.testing.assert_allclose(c1, c_ref, rtol=1e-12)
    np.testing.assert_allclose(h1, h_ref, rtol=1e-12)
    assert h1 is h1_again


def test_lstm_zero_initial_state():
    cell = mf.nn.LSTMCell(3, 2, rng=0)
    h, c = cell.initial_state((4,))
    assert h.shape == (4, 2) and c.dtype == np.float32 and not h.any()
    x = np.ones((4, 3), np.float32)
    np.testing.assert_array_equal(cell(x)[0], cell(x, (h, c))[0])


def test_recurrence_carries_state_between_segments():
    rnn = mf.nn.Recurrence(mf.nn.LSTMCell(2, 3, rng=0))
    xs = np.random.default_rng(0).standard_normal((6, 4, 2)).astype(np.float32)
    whole, state = rnn(xs)
    first, mid = rnn(xs[:4])
    second, state2 = rnn(list(xs[4:]), mid)
    for a, b in zip(whole, first + second):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(state[1], state2[1])


def test_chain_indexing_and_errors():
    r = np.random.default_rng(0)
    model = mf.nn.Chain(mf.nn.Dense(2, 3, rng=r), mf.relu, mf.nn.Dense(3, 1, rng=r))
    assert len(model) == 3 and model[1] is mf.relu
    assert isinstance(model[:2], mf.nn.Chain) and len(model[:2]) == 2
    x = np.ones((1, 2), np.float32)
    np.testing.assert_allclose(model(x), model[2](mf.relu(model[0](x))))
    with pytest.raises(TypeError, match="layer 1 is a int"):
        mf.nn.Chain(model[0], 3)
