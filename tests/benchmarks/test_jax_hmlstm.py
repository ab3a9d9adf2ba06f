"""The JAX speed peer computes `models.HMLSTM`'s loss and gradients (copied weights, float64)."""
import sys
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_case as case  # noqa: E402


@pytest.fixture
def x64():
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", previous)


def jax_state(state):
    import jax.numpy as jnp
    return tuple(tuple(jnp.asarray(s[k]) for k in ("c", "h", "z")) for s in state)


SLOW = pytest.mark.slow  # tracing and compiling each variant takes JAX about ten seconds


@pytest.mark.parametrize("layer_norm,cell_form", [
    (False, "branch"), pytest.param(True, "branch", marks=SLOW), pytest.param(False, "blend", marks=SLOW),
    pytest.param(True, "blend", marks=SLOW)])
def test_loss_and_gradients_match_the_model(x64, layer_norm, cell_form):
    import jax_hmlstm

    model = case.model(layer_norm, cell_form)
    state = case.initial_state(model)
    loss, grads = case.minflux_loss_and_grads(model, state)
    params, config = jax_hmlstm.params_from_minflux(model)
    assert params["embed"].dtype == np.float64
    (their_loss, their_state), their_grads = jax.value_and_grad(jax_hmlstm.loss, has_aux=True)(
        params, config, case.TOKENS, case.TARGETS, jax_state(state))
    case.assert_matches(model, loss, grads, float(their_loss),
                        jax_hmlstm.minflux_gradients(their_grads, config))
    _, new_state, _ = model(case.TOKENS, state)
    for ours, theirs in zip(new_state, their_state):
        for k, t in zip(("c", "h", "z"), theirs):
            np.testing.assert_allclose(np.asarray(t), ours[k], rtol=1e-10, atol=1e-12, err_msg=k)


@pytest.mark.slow
def test_jitted_step_lowers_the_loss(x64):
    import jax_hmlstm

    params, config = jax_hmlstm.params_from_minflux(case.model(False, "branch"))
    opt_state = jax_hmlstm.adam_init(params)
    step = jax_hmlstm.make_step(config, lr=0.01)
    state = jax_hmlstm.initial_state(config, case.TOKENS.shape[0], np.float64)
    params, opt_state, first = step(params, opt_state, case.TOKENS, case.TARGETS, state)
    for _ in range(20):
        params, opt_state, last = step(params, opt_state, case.TOKENS, case.TARGETS, state)
    assert float(last) < float(first) - 0.1
