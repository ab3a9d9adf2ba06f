"""The PyTorch speed peer computes `models.HMLSTM`'s loss and gradients (copied weights, float64)."""
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_case as case  # noqa: E402
from torch_hmlstm import TorchHMLSTM, make_step  # noqa: E402


def torch_state(state):
    return [tuple(torch.from_numpy(s[k].copy()) for k in ("c", "h", "z")) for s in state]


@pytest.mark.parametrize("cell_form", ["branch", "blend"])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_loss_and_gradients_match_the_model(layer_norm, cell_form):
    model = case.model(layer_norm, cell_form)
    state = case.initial_state(model)
    loss, grads = case.minflux_loss_and_grads(model, state)
    peer = TorchHMLSTM.from_minflux(model)
    their_loss, _ = peer.loss(torch.from_numpy(case.TOKENS), torch.from_numpy(case.TARGETS), torch_state(state))
    their_loss.backward()
    their_grads = peer.minflux_gradients()
    case.assert_matches(model, loss, grads, float(their_loss.detach()), their_grads)
    # the comparison saw real gradients through every kind of weight
    assert all(np.any(grads[n]) for n in ("layers.0.U_top", "layers.1.W", "layers.2.U", "output.embed_W.2"))


def test_final_state_matches_the_model():
    model = case.model(False, "branch")
    state = case.initial_state(model)
    _, new_state, _ = model(case.TOKENS, state)
    _, their_state = TorchHMLSTM.from_minflux(model)(torch.from_numpy(case.TOKENS), torch_state(state))
    for ours, theirs in zip(new_state, their_state):
        for k, t in zip(("c", "h", "z"), theirs):
            np.testing.assert_allclose(t.numpy(), ours[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_step_lowers_the_loss():
    model = case.model(False, "branch")
    peer = TorchHMLSTM.from_minflux(model)
    x, y = torch.from_numpy(case.TOKENS), torch.from_numpy(case.TARGETS)
    step = make_step(peer, x, y, lr=0.01)
    first = float(step().detach())
    for _ in range(20):
        last = float(step().detach())
    assert last < first - 0.1
