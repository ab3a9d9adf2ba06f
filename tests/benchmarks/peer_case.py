"""A small HM-LSTM case shared by the peer-equivalence tests: model, tokens, a state that exercises
FLUSH, COPY and UPDATE from the first step, and minflux's own loss and gradients (float64)."""
import numpy as np

import minflux as mf
from minflux_models import HMLSTM

VOCAB = 9
TOKENS = np.array([[1, 4, 2, 6, 0, 8, 3], [3, 3, 5, 1, 2, 7, 7], [0, 6, 6, 2, 4, 1, 5]])
TARGETS = np.roll(TOKENS, -1, axis=1)


def model(layer_norm: bool, cell_form: str) -> HMLSTM:
    m = HMLSTM(VOCAB, embed_size=5, hidden_sizes=(6, 4, 3), output_embed_size=7, layer_norm=layer_norm,
               cell_form=cell_form, slope=2.0, rng=np.random.default_rng(1), dtype=np.float64)
    rng = np.random.default_rng(2)
    for layer in m.layers:  # non-zero biases (the boundary column included) and norm affines
        layer.b[:] = rng.normal(scale=0.5, size=layer.b.shape)
        if layer.has_boundary:
            layer.b[-1] = 0.0  # boundaries fire on some steps, not all
        for norm in layer.norms or []:
            norm.scale[:] = rng.uniform(0.5, 1.5, norm.scale.shape)
            norm.shift[:] = rng.normal(scale=0.3, size=norm.shift.shape)
    return m


def initial_state(m: HMLSTM) -> list[dict]:
    rng = np.random.default_rng(3)
    state = m.initial_state(TOKENS.shape[0])
    for l, s in enumerate(state):
        s["c"][:] = rng.normal(size=s["c"].shape)
        s["h"][:] = np.tanh(rng.normal(size=s["h"].shape))
        if l + 1 < len(state):
            s["z"][:] = [[1.0], [0.0], [1.0]]
    return state


def minflux_loss_and_grads(m: HMLSTM, state):
    def loss_fn(mm):
        logits, new_state, z = mm(TOKENS, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, VOCAB)), TARGETS.reshape(-1)), (new_state, z)

    loss, (grads,) = mf.withgradient(loss_fn, m)
    loss_value = float(mf.to_numpy(loss[0] if isinstance(loss, tuple) else loss))
    named = dict(mf.tree.named_leaves(grads, trainable_only=False))
    return loss_value, named


def assert_matches(m: HMLSTM, loss, grads, their_loss, their_grads):
    """The peer's loss and every one of its gradients (named as in ``m``) equal minflux's."""
    names = [n for n, _ in mf.tree.named_leaves(m)]
    assert set(their_grads) <= set(names), f"the peer names unknown weights {set(their_grads) - set(names)}"
    assert set(grads) <= set(their_grads), f"the peer lacks gradients {set(grads) - set(their_grads)}"
    assert abs(loss - their_loss) < 1e-10 * max(1.0, abs(loss)), (loss, their_loss)
    for name in names:
        ours, theirs = grads.get(name), their_grads.get(name)
        if ours is None or theirs is None:
            assert ours is None or not np.any(ours), f"{name}: minflux has a gradient, the peer none"
            assert theirs is None or not np.any(theirs), f"{name}: the peer has a gradient, minflux none"
            continue
        np.testing.assert_allclose(theirs, ours, rtol=1e-9, atol=1e-11, err_msg=name)
