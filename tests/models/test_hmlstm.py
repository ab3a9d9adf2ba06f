"""The HM-LSTM and LSTM language models: gradients, state carry, modes, and learning."""
import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad
from models import HMLSTM, LSTMLM, annealed_slope, boundary_rates
from models.cells import boundary


def small_hmlstm(**kw):
    opts = dict(embed_size=5, hidden_sizes=(4, 3), output_embed_size=6, rng=np.random.default_rng(0),
                dtype=np.float64)
    opts.update(kw)
    return HMLSTM(7, **opts)


TOKENS = np.array([[1, 4, 2, 6, 0], [3, 3, 5, 1, 2]])
TARGETS = np.roll(TOKENS, -1, axis=1)


def lm_loss(model, state):
    logits, new_state, z = model(TOKENS, state)
    return mf.cross_entropy(mf.reshape(logits, (-1, model.vocab_size)), TARGETS.reshape(-1)), new_state, z


def boundary_preactivations(model, state, monkeypatch):
    """Every boundary pre-activation the model computes on TOKENS."""
    seen = []
    original = mf.broadcast

    def spy(fn, *args, **kw):
        if fn is boundary:
            seen.append(np.asarray(mf.to_numpy(args[0])).ravel())
        return original(fn, *args, **kw)

    with monkeypatch.context() as patch:
        patch.setattr(mf, "broadcast", spy)
        model(TOKENS, state)
    assert seen, "the model computed no boundary"
    return np.concatenate(seen)


@pytest.mark.parametrize("cell_form", ["branch", "blend"])
@pytest.mark.parametrize("layer_norm", [False, True])
def test_gradients_against_finite_differences(cell_form, layer_norm, monkeypatch):
    """With a steep slope no boundary pre-activation lies in the straight-through window, so the
    straight-through terms vanish and finite differences see the exact gradient of every path."""
    model = small_hmlstm(cell_form=cell_form, layer_norm=layer_norm, slope=1e3)
    state = model.initial_state(2)
    state[0]["z"][:] = [[1.0], [0.0]]
    assert np.all(np.abs(boundary_preactivations(model, state, monkeypatch)) > 1e-3), "test needs a different seed"
    check_grad(lambda m: lm_loss(m, state)[0], model, max_elements=30)


def test_boundaries_fire_and_are_binary():
    model = small_hmlstm()
    _, _, z = lm_loss(model, model.initial_state(2))
    assert z.shape == (2, 5, 1)
    assert set(np.unique(z)) <= {0.0, 1.0}
    assert 0.0 < z.mean() < 1.0            # fires on some steps, not all
    assert boundary_rates(z) == [float(z.mean())]


def test_whole_model_gradient_follows_the_straight_through_rule(monkeypatch):
    """With the straight-through estimator active, the model's gradient equals finite differences of
    a surrogate model whose boundaries are the linearisation the rule prescribes,
    ``z = step(x0) + slope / 2 * [|x0| < 1 / slope] * (x - x0)`` around this point's pre-activations
    ``x0``. The blend form uses z only arithmetically, so the surrogate is differentiable everywhere
    finite differences look; gradients (taped) use the real boundary, plain evaluations the surrogate."""
    from minflux.autograd import active_tape

    model = small_hmlstm(cell_form="blend", slope=1.0)
    state = model.initial_state(2)
    original, recorded, calls = mf.broadcast, [], [0]

    def boundary_or_surrogate(fn, *args, **kw):
        if fn is not boundary or active_tape() is not None:
            return original(fn, *args, **kw)
        if recording:
            recorded.append((np.array(args[0]), args[1]))
            return original(fn, *args, **kw)
        x0, slope = recorded[calls[0] % len(recorded)]
        calls[0] += 1
        window = (np.abs(x0) * slope < 1) * (slope / 2)
        return (x0 > 0) + window * (args[0] - x0)

    monkeypatch.setattr(mf, "broadcast", boundary_or_surrogate)
    recording = True
    model(TOKENS, state)
    recording = False
    inside = sum(int(np.sum(np.abs(x0) * slope < 1)) for x0, slope in recorded)
    assert inside >= 3, "no boundary pre-activation in the straight-through window: pick another seed"
    check_grad(lambda m: lm_loss(m, state)[0], model, max_elements=20)


@pytest.mark.parametrize("cell_form", ["branch", "blend"])
def test_reverse_mode_agrees_with_mixed_mode(cell_form):
    grads = {}
    for mode in ("mixed", "reverse"):
        model = small_hmlstm(cell_form=cell_form, mode=mode, slope=1.0)
        state = model.initial_state(2)
        (grads[mode],) = mf.gradient(lambda m: lm_loss(m, state)[0], model)
    mixed = dict(mf.tree.named_leaves(grads["mixed"], trainable_only=False))
    for name, value in mf.tree.named_leaves(grads["reverse"], trainable_only=False):
        np.testing.assert_allclose(value, mixed[name], rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("make", [small_hmlstm, lambda: LSTMLM(7, embed_size=5, hidden_sizes=(4, 3),
                                                                 rng=np.random.default_rng(0), dtype=np.float64)])
def test_state_carry_across_segments_equals_one_segment(make):
    model = make()
    whole, whole_state, _ = model(TOKENS, model.initial_state(2))
    first, state, _ = model(TOKENS[:, :2], model.initial_state(2))
    second, split_state, _ = model(TOKENS[:, 2:], state)
    np.testing.assert_allclose(np.concatenate([first, second], axis=1), whole, rtol=1e-12)
    for a, b in zip(mf.tree.leaves(split_state), mf.tree.leaves(whole_state)):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_annealing_schedule():
    assert [annealed_slope(e) for e in (0, 25, 100, 1000)] == [1.0, 2.0, 5.0, 5.0]


def overfit(model, steps, lr=0.01):
    text = "abcab_abcab_" * 4
    ids = np.array([ord(ch) - ord("_") if ch == "_" else ord(ch) - ord("a") + 1 for ch in text])
    tokens = np.stack([ids[:-1], np.roll(ids, 3)[:-1]])
    targets = np.stack([ids[1:], np.roll(ids, 3)[1:]])
    opt = mf.optim.setup(mf.optim.Adam(lr), model)
    for _ in range(steps):
        def loss_fn(m):
            logits, _, _ = m(tokens, m.initial_state(2))
            return mf.cross_entropy(mf.reshape(logits, (-1, m.vocab_size)), targets.reshape(-1))
        loss, (grads,) = mf.withgradient(loss_fn, model)
        mf.optim.update(opt, model, grads)
    return float(loss)


@pytest.mark.parametrize("kind", ["hmlstm", "lstm"])
def test_models_overfit_a_repeated_string(kind):
    rng = np.random.default_rng(0)
    if kind == "hmlstm":
        model = HMLSTM(4, embed_size=8, hidden_sizes=(16, 16), rng=rng)
    else:
        model = LSTMLM(4, embed_size=8, hidden_sizes=(16,), rng=rng)
    assert overfit(model, 150) < 0.15
