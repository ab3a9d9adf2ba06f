"""GRUCell and the stacked RNN: an independent numpy formula, finite differences, and PyTorch's
nn.GRUCell / nn.GRU with copied weights (skipped without torch)."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def sigmoid(a):
    return 1 / (1 + np.exp(-a))


def reference_gru(cell, x, h):
    """The GRU equations written out in numpy, one gate at a time."""
    H = cell.hidden
    Wx, Wh, b = cell.Wx, cell.Wh, cell.b
    r = sigmoid(x @ Wx[:, :H] + h @ Wh[:, :H] + b[:H])
    z = sigmoid(x @ Wx[:, H:2 * H] + h @ Wh[:, H:2 * H] + b[H:2 * H])
    n = np.tanh(x @ Wx[:, 2 * H:] + b[2 * H:] + r * (h @ Wh[:, 2 * H:] + cell.bh))
    return (1 - z) * n + z * h


def random_cell(rng, n_in=3, hidden=4, dtype=np.float64):
    cell = mf.nn.GRUCell(n_in, hidden, rng=rng, dtype=dtype)
    cell.b = rng.standard_normal(cell.b.shape).astype(dtype)
    cell.bh = rng.standard_normal(cell.bh.shape).astype(dtype)
    return cell


def test_gru_cell_matches_the_equations(rng):
    cell = random_cell(rng)
    x, h = rng.standard_normal((5, 3)), rng.standard_normal((5, 4))
    y, state = cell(x, h)
    np.testing.assert_allclose(y, reference_gru(cell, x, h), rtol=1e-12)
    assert state is y
    np.testing.assert_allclose(cell(x)[0], reference_gru(cell, x, np.zeros((5, 4))), rtol=1e-12)


def test_gru_cell_gradients_match_finite_differences(rng):
    cell = random_cell(rng)
    x, h = rng.standard_normal((2, 3)), rng.standard_normal((2, 4))
    w = rng.standard_normal((2, 4))
    check_grad(lambda c, x, h: mf.sum(c(x, h)[0] * w), cell, x, h)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gru_cell_keeps_the_dtype(dtype, rng):
    cell = mf.nn.GRUCell(3, 4, rng=rng, dtype=dtype)
    y, _ = cell(np.ones((2, 3), dtype))
    assert y.dtype == dtype
    grads, = mf.gradient(lambda c: mf.sum(c(np.ones((2, 3), dtype))[0]), cell)
    assert grads.Wx.dtype == dtype and grads.bh.dtype == dtype


def test_gru_cell_rejects_a_wrong_input_width(rng):
    with pytest.raises(ValueError, match="last axis has length 3"):
        mf.nn.GRUCell(3, 4, rng=rng)(np.ones((2, 5)))


def test_rnn_runs_each_layer_over_the_sequence(rng):
    rnn = mf.nn.RNN(mf.nn.GRUCell, [3, 4, 2], rng=rng, dtype=np.float64)
    xs = rng.standard_normal((5, 2, 3))
    outputs, states = rnn(xs)
    h0, h1 = np.zeros((2, 4)), np.zeros((2, 2))
    for t in range(5):
        h0 = reference_gru(rnn.cells[0], xs[t], h0)
        h1 = reference_gru(rnn.cells[1], h0, h1)
        np.testing.assert_allclose(outputs[t], h1, rtol=1e-12)
    np.testing.assert_allclose(states[0], h0, rtol=1e-12)
    np.testing.assert_allclose(states[1], h1, rtol=1e-12)
    again, _ = rnn(xs[3:], rnn(xs[:3])[1])   # carrying the state across segments
    np.testing.assert_allclose(again[-1], outputs[-1], rtol=1e-12)


def test_rnn_gradients_match_finite_differences(rng):
    rnn = mf.nn.RNN(mf.nn.LSTMCell, [2, 3, 2], rng=rng, dtype=np.float64)
    xs = rng.standard_normal((3, 2, 2))
    w = rng.standard_normal((2, 2))
    check_grad(lambda m, xs: mf.sum(m(xs)[0][-1] * w), rnn, xs)


def test_rnn_dropout_acts_between_layers_only_while_training(rng):
    rnn = mf.nn.RNN(mf.nn.GRUCell, [3, 4, 4], rng=rng, dropout=0.5)
    xs = np.ones((2, 1, 3), np.float32)
    plain = rnn(xs)[0][-1]   # automatic mode, no gradient: no dropout
    mf.nn.trainmode(rnn)
    dropped = rnn(xs)[0][-1]
    mf.nn.testmode(rnn)
    np.testing.assert_array_equal(rnn(xs)[0][-1], plain)
    assert not np.allclose(dropped, plain)


def test_rnn_checks_sizes_and_states(rng):
    with pytest.raises(ValueError, match="at least"):
        mf.nn.RNN(mf.nn.GRUCell, [3], rng=rng)
    rnn = mf.nn.RNN(mf.nn.GRUCell, [3, 4, 4], rng=rng)
    with pytest.raises(ValueError, match="one per layer"):
        rnn(np.ones((2, 1, 3), np.float32), [None])


# -- PyTorch with copied weights -----------------------------------------------------------------

def copy_from_torch(cell, torch_cell, suffix=""):
    H = cell.hidden
    w_ih = getattr(torch_cell, "weight_ih" + suffix).detach().numpy().astype(np.float64)
    w_hh = getattr(torch_cell, "weight_hh" + suffix).detach().numpy().astype(np.float64)
    b_ih = getattr(torch_cell, "bias_ih" + suffix).detach().numpy().astype(np.float64)
    b_hh = getattr(torch_cell, "bias_hh" + suffix).detach().numpy().astype(np.float64)
    cell.Wx, cell.Wh = w_ih.T.copy(), w_hh.T.copy()
    cell.b = b_ih + np.concatenate([b_hh[:2 * H], np.zeros(H)])   # r and z add both biases
    cell.bh = b_hh[2 * H:].copy()                                    # the candidate's sits inside r * (...)


def test_gru_cell_matches_torch_values_and_gradients(rng):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    torch_cell = torch.nn.GRUCell(3, 4).double()
    cell = mf.nn.GRUCell(3, 4, rng=rng, dtype=np.float64)
    copy_from_torch(cell, torch_cell)
    x, h = rng.standard_normal((5, 3)), rng.standard_normal((5, 4))
    w = rng.standard_normal((5, 4))
    tx = torch.tensor(x, requires_grad=True)
    th = torch.tensor(h, requires_grad=True)
    ty = torch_cell(tx, th)
    (ty * torch.tensor(w)).sum().backward()
    y, _ = cell(x, h)
    np.testing.assert_allclose(y, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    gc, gx, gh = mf.gradient(lambda c, x, h: mf.sum(c(x, h)[0] * w), cell, x, h)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gh, th.grad.numpy(), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gc.Wx, torch_cell.weight_ih.grad.numpy().T, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gc.Wh, torch_cell.weight_hh.grad.numpy().T, rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gc.bh, torch_cell.bias_hh.grad.numpy()[8:], rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(gc.b, torch_cell.bias_ih.grad.numpy(), rtol=1e-10, atol=1e-14)


def test_rnn_matches_a_two_layer_torch_gru(rng):
    torch = pytest.importorskip("torch")
    torch.manual_seed(1)
    torch_gru = torch.nn.GRU(3, 5, num_layers=2).double()
    rnn = mf.nn.RNN(mf.nn.GRUCell, [3, 5, 5], rng=rng, dtype=np.float64)
    for k, cell in enumerate(rnn.cells):
        copy_from_torch(cell, torch_gru, f"_l{k}")
    xs = rng.standard_normal((6, 2, 3))
    h0 = rng.standard_normal((2, 2, 5))
    tx = torch.tensor(xs, requires_grad=True)
    ty, th = torch_gru(tx, torch.tensor(h0))
    w = rng.standard_normal((6, 2, 5))
    (ty * torch.tensor(w)).sum().backward()
    outputs, states = rnn(xs, (h0[0], h0[1]))
    np.testing.assert_allclose(np.stack(outputs), ty.detach().numpy(), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(np.stack(states), th.detach().numpy(), rtol=1e-11, atol=1e-13)
    gm, gx = mf.gradient(lambda m, xs: mf.sum(mf.stack(m(xs, (h0[0], h0[1]))[0]) * w), rnn, xs)
    np.testing.assert_allclose(gx, tx.grad.numpy(), rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(gm.cells[1].Wh, torch_gru.weight_hh_l1.grad.numpy().T, rtol=1e-9, atol=1e-13)
