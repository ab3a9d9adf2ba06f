"""The HM-LSTM and LSTM language models: gradients, the straight-through boundary, state carry, learning."""
import numpy as np
import pytest

import minflux as mf
from minflux.autograd import active_tape
from minflux.testing import check_grad
from minflux_models import HMLSTM, LSTMLM, annealed_slope, boundary_rates
from minflux_models.cells import detect_boundary

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def small_hmlstm(hidden_sizes=(4, 3), **kw):
    opts = dict(embed_size=5, output_embed_size=6, rng=np.random.default_rng(0), dtype=np.float64)
    opts.update(kw)
    return HMLSTM(7, hidden_sizes=hidden_sizes, **opts)


TOKENS = np.array([[1, 4, 2, 6, 0], [3, 3, 5, 1, 2]])
TARGETS = np.roll(TOKENS, -1, axis=1)


def lm_loss(model, state, tokens=TOKENS, targets=TARGETS):
    logits, new_state, z = model(tokens, state)
    return mf.cross_entropy(mf.reshape(logits, (-1, model.vocab_size)), targets.reshape(-1)), new_state, z


class BoundarySpy:
    """Wraps ``mf.broadcast`` so that each boundary call adds ``deltas[k]`` to its pre-activation.

    Taped calls (the gradient) use the real straight-through boundary; untaped calls (finite
    differences) use its linearisation around the pre-activations ``x0`` seen with zero deltas,
    ``z = step(x0) + slope / 2 * [|x0| < 1 / slope] * (x - x0)``. Under ``choice_from_primal`` the cell
    update sees the rounded ``z`` (the branch form chooses by value and gives ``z`` no gradient there).
    """

    def __init__(self, monkeypatch, choice_from_primal: bool):
        self.original, self.x0, self.calls, self.deltas = mf.broadcast, [], 0, None
        self.choice_from_primal = choice_from_primal
        monkeypatch.setattr(mf, "broadcast", self)

    def __call__(self, fn, *args, **kw):
        if fn is not detect_boundary:
            if self.choice_from_primal and active_tape() is None and self.x0:
                args = tuple(np.round(mf.to_numpy(a)) if k < 2 else a for k, a in enumerate(args))
            return self.original(fn, *args, **kw)
        k, self.calls = self.calls, self.calls + 1
        x, slope = args[0], args[1]
        if self.deltas is None:                        # the recording pass
            self.x0.append(np.array(mf.to_numpy(x)))
            return self.original(fn, x, slope, **kw)
        k %= len(self.x0)
        x = x + self.deltas[k]
        if active_tape() is not None:
            return self.original(fn, x, slope, **kw)
        x0 = self.x0[k]
        return (x0 > 0) + (np.abs(x0) * slope < 1) * (slope / 2) * (mf.to_numpy(x) - x0)


@pytest.mark.parametrize("cell_form", ["branch", "blend"])
def test_straight_through_gradient_in_every_case_against_the_linearised_rule(cell_form, monkeypatch):
    """Three layers, so the middle detector gates top-down input (after its own flush) and bottom-up
    input of the top layer (UPDATE vs COPY), and its layer flushes or not; in the blend the choice of
    operation also carries gradient. The gradient reaching every boundary pre-activation equals finite
    differences of the model with the boundary replaced by the rule's linearisation."""
    model = small_hmlstm(hidden_sizes=(4, 3, 3), cell_form=cell_form, slope=1.0)
    tokens = np.random.default_rng(5).integers(0, 7, size=(6, 4))
    targets = np.roll(tokens, -1, axis=1)
    state = model.initial_state(6)
    spy = BoundarySpy(monkeypatch, choice_from_primal=cell_form == "branch")
    model(tokens, state)
    x0 = np.stack(spy.x0).reshape(4, 2, 6)                 # (step, detector, row)
    z0, window = x0 > 0, np.abs(x0) < 1
    for layer in range(2):                                   # every case occurs inside the window
        assert (window & z0)[:-1, layer].sum() >= 2 and (window & ~z0)[:-1, layer].sum() >= 2
    spy.deltas = [np.zeros((6, 1)) for _ in spy.x0]

    def loss(deltas):
        spy.deltas = deltas
        return lm_loss(model, state, tokens, targets)[0]

    check_grad(loss, spy.deltas, rtol=1e-6, atol=1e-9)
    (grads,) = mf.gradient(loss, [np.zeros((6, 1)) for _ in spy.x0])
    g = np.stack([mf.to_numpy(d) for d in grads]).reshape(4, 2, 6)
    assert np.all(g[~window] == 0)
    for layer in range(2):       # the checked gradients are not all zero, for z = 1 and for z = 0
        inside, fired = window[:, layer], z0[:, layer]
        assert np.any(g[:, layer][inside & fired]) and np.any(g[:, layer][inside & ~fired])


def test_branch_form_gives_the_boundary_gradient_only_through_the_gates(monkeypatch):
    """With no top-down weights and no bottom-up weights above the detector, nothing is gated by z,
    so in the branch form (which gives z no gradient through the choice) it receives exactly none."""
    model = small_hmlstm(cell_form="branch", slope=1.0)
    model.layers[0].U_top = np.zeros_like(model.layers[0].U_top)
    model.layers[1].W = np.zeros_like(model.layers[1].W)
    spy = BoundarySpy(monkeypatch, choice_from_primal=True)
    state = model.initial_state(2)
    model(TOKENS, state)
    spy.deltas = [np.zeros((2, 1)) for _ in spy.x0]

    def loss(deltas):
        spy.deltas = deltas
        return lm_loss(model, state)[0]

    (grads,) = mf.gradient(loss, spy.deltas)
    assert all(not np.any(mf.to_numpy(d)) for d in grads)
    model.cell_form = "blend"                                # the blend's choice of operation does
    (grads,) = mf.gradient(loss, spy.deltas)
    assert any(np.any(mf.to_numpy(d)) for d in grads)


@pytest.mark.parametrize("cell_form", ["branch", "blend"])
def test_gradients_against_finite_differences(cell_form, monkeypatch):
    """With a steep slope no boundary pre-activation lies in the straight-through window, so the
    straight-through terms vanish and finite differences see the exact gradient of every path."""
    model = small_hmlstm(cell_form=cell_form, slope=1e3)
    state = model.initial_state(2)
    state[0]["z"][:] = [[1.0], [0.0]]
    spy = BoundarySpy(monkeypatch, choice_from_primal=False)
    model(TOKENS, state)
    assert np.all(np.abs(np.concatenate(spy.x0)) > 1e-3), "test needs a different seed"
    monkeypatch.setattr(mf, "broadcast", spy.original)
    check_grad(lambda m: lm_loss(m, state)[0], model, max_elements=6)


def test_skipping_copy_rows_gives_the_dense_loss_gradients_and_state(monkeypatch):
    """Rows that COPY get no gate products (branch form); loss, every gradient, the new state and the
    boundaries equal the dense computation's, and the skipping path ran in the middle and top layers."""
    import minflux.ops.row_masking as rmm

    model = small_hmlstm(hidden_sizes=(4, 3, 3), cell_form="branch", slope=1.0)
    tokens = np.random.default_rng(5).integers(0, 7, size=(8, 6))
    state = model.initial_state(8)
    skipped_rows = []
    dense_product = rmm.product

    def counting(a, b, out=None):
        if a.shape[0] < 8:
            skipped_rows.append((b.shape[1], 8 - a.shape[0]))
        return dense_product(a, b, out)

    monkeypatch.setattr(rmm, "product", counting)
    results = {}
    for name, fraction in [("dense", 2.0), ("skipping", 0.0)]:
        monkeypatch.setattr(rmm, "SKIP_MIN_FRACTION", fraction)
        monkeypatch.setattr(rmm, "SKIP_MIN_WORK", 0)
        value, (grads,) = mf.withgradient(lambda m: lm_loss(m, state, tokens, np.roll(tokens, -1, 1)), model)
        results[name] = (*value, grads)
    assert {columns for columns, rows in skipped_rows if rows} == {4 * 3}   # middle and top layers' gates
    assert len(skipped_rows) > 2
    (loss0, state0, z0, g0), (loss1, state1, z1, g1) = results["dense"], results["skipping"]
    np.testing.assert_allclose(loss1, loss0, rtol=1e-13)
    np.testing.assert_array_equal(z1, z0)
    for a, b in zip(state1, state0):
        for key in a:
            np.testing.assert_allclose(a[key], b[key], rtol=1e-13, atol=1e-15)
    for (name, a), (_, b) in zip(mf.tree.named_leaves(g1), mf.tree.named_leaves(g0)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15, err_msg=name)


def test_layer_norm_gradients_against_finite_differences():
    model = small_hmlstm(cell_form="blend", slope=1e3, layer_norm=True)
    state = model.initial_state(2)
    check_grad(lambda m: lm_loss(m, state)[0], model, max_elements=4)


def test_boundaries_fire_and_are_binary():
    model = small_hmlstm()
    _, _, z = lm_loss(model, model.initial_state(2))
    assert z.shape == (2, 5, 1)
    assert set(np.unique(z)) <= {0.0, 1.0}
    assert 0.0 < z.mean() < 1.0            # fires on some steps, not all
    assert boundary_rates(z) == [float(z.mean())]


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


def test_authors_initialisation_replicates_gate_blocks_and_copies_top_down_from_recurrent():
    H = 4
    model = small_hmlstm(hidden_sizes=(H, H), init="authors")
    layer = model.layers[0]
    for w in (layer.U, layer.W, layer.U_top):
        blocks = [w[:, k * H:(k + 1) * H] for k in range(4)]
        assert all(np.array_equal(blocks[0], b) for b in blocks[1:]) and w.shape[1] == 4 * H + 1
    np.testing.assert_allclose(layer.U[:, :H] @ layer.U[:, :H].T, np.eye(H), atol=1e-12)  # orthogonal
    assert np.array_equal(layer.U_top, layer.U)
    assert model.layers[1].U.shape == (H, 4 * H) and model.layers[1].U_top is None     # top: no detector
    independent = small_hmlstm(hidden_sizes=(H, H), init="independent").layers[0]
    assert not np.array_equal(independent.U[:, :H], independent.U[:, H:2 * H])
    assert not np.array_equal(independent.U_top, independent.U)
    with pytest.raises(ValueError, match="init must be one of"):
        small_hmlstm(init="xavier")


def test_an_hmlstm_needs_two_layers():
    with pytest.raises(ValueError, match="at least 2 layers.*no boundary detector"):
        small_hmlstm(hidden_sizes=(4,))


def test_annealing_schedule():
    assert [annealed_slope(e) for e in (0, 25, 100, 1000)] == [1.0, 2.0, 5.0, 5.0]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hmlstm", "lstm"])
def test_models_overfit_a_repeated_string(kind):
    rng = np.random.default_rng(0)
    if kind == "hmlstm":
        model = HMLSTM(4, embed_size=8, hidden_sizes=(16, 16), rng=rng)
    else:
        model = LSTMLM(4, embed_size=8, hidden_sizes=(16,), rng=rng)
    ids = np.array([1, 2, 3, 1, 2, 0] * 4)                 # "abcab_" repeated
    tokens, targets = ids[None, :-1], ids[None, 1:]
    opt = mf.optim.setup(mf.optim.Adam(0.03), model)
    for _ in range(40):
        loss, (grads,) = mf.withgradient(lambda m: lm_loss(m, m.initial_state(1), tokens, targets)[0], model)
        mf.optim.update(opt, model, grads)
    assert float(loss) < 0.2                               # from log(4) = 1.39 nats


def word_text(words: int, seed: int = 0) -> str:
    """Real-looking text: sentences of words from a small lexicon, separated by spaces and full stops."""
    lexicon = ("the a cat dog sat ran on in to of big red mat fog sun hat and was is we they it at by "
               "small old new tree house river stone bird song light night day").split()
    rng = np.random.default_rng(seed)
    out, sentence = [], []
    for _ in range(words):
        sentence.append(lexicon[rng.integers(len(lexicon))])
        if len(sentence) >= rng.integers(4, 9):
            out.append(" ".join(sentence) + ".")
            sentence = []
    return " ".join(out) + " "


def paper_hmlstm(torch, p: dict, tokens, state, slope: float, form: str):
    """The HM-LSTM of Chung, Ahn and Bengio (2017), written from the paper's equations in torch.

    ``s = U h_l(t-1) + z_l(t-1) U_top h_l+1(t-1) + z_l-1(t) W h_l-1(t) + b``; f, i, o sigmoid, g tanh;
    c = i g (FLUSH, z_l(t-1) = 1), f c + i g (UPDATE, z_l-1(t) = 1), c (COPY); h = o tanh(c) unless
    COPY; z = round(hard_sigm(a s_z)) with the straight-through estimator. ``form = "blend"`` lets the
    choice of operation carry gradient (the operations multiplied out); ``"branch"`` does not. Then the
    output module: gates ``sigmoid([h_1..h_L] w)``, ``relu(sum_l gate_l h_l W_l)``, a softmax layer.
    """
    L = len(p["U"])
    x = p["E"][tokens]
    B, T = tokens.shape
    c, h, z = (list(v) for v in state)
    hs, zs = [[] for _ in range(L)], []
    for t in range(T):
        h_below, z_below = x[:, t], torch.ones(B, 1, dtype=torch.float64)
        new = []
        for l in range(L):
            H = p["U"][l].shape[0]
            s = h[l] @ p["U"][l] + z_below * (h_below @ p["W"][l]) + p["b"][l]
            if l < L - 1:
                s = s + z[l] * (h[l + 1] @ p["U_top"][l])
            f, i, o = (torch.sigmoid(s[:, k * H:(k + 1) * H]) for k in range(3))
            g = torch.tanh(s[:, 3 * H:4 * H])
            zl, zb = (z[l], z_below) if form == "blend" else (z[l].detach(), z_below.detach())
            copy = (1 - zl) * (1 - zb)
            c_new = zl * (i * g) + (1 - zl) * zb * (f * c[l] + i * g) + copy * c[l]
            h_new = (1 - copy) * o * torch.tanh(c_new) + copy * h[l]
            if l < L - 1:
                soft = torch.clamp((slope * s[:, 4 * H:] + 1) / 2, 0, 1)
                z_new = (soft > 0.5).double() + soft - soft.detach()
            else:
                z_new = z[l]
            new.append((c_new, h_new, z_new))
            hs[l].append(h_new)
            h_below, z_below = h_new, z_new
        c, h, z = (list(v) for v in zip(*new))
        zs.append(torch.cat(z[:-1], dim=-1).detach())
    seq = [torch.stack(v, dim=1) for v in hs]
    gates = torch.sigmoid(torch.cat(seq, dim=-1) @ p["gate_W"] + p["gate_b"])
    mixed = p["embed_b"] + sum(gates[..., l:l + 1] * (seq[l] @ p["embed_W"][l]) for l in range(L))
    logits = torch.relu(mixed) @ p["out_W"] + p["out_b"]
    return logits, (c, h, z), torch.stack(zs, dim=1)


@pytest.mark.parametrize("cell_form", ["branch", "blend"])
def test_early_training_follows_an_independent_implementation_of_the_paper(cell_form):
    """Same initial weights, data, Adam and clipping: the z rate of every step for 30 steps and the
    losses agree with the torch implementation above (float64)."""
    torch = pytest.importorskip("torch")
    text = word_text(400)
    symbols = sorted(set(text))
    ids = np.array([symbols.index(ch) for ch in text])
    B, T, steps, lr = 4, 12, 30, 0.01
    streams = ids[:len(ids) // B * B].reshape(B, -1)
    model = HMLSTM(len(symbols), embed_size=6, hidden_sizes=(8, 6), output_embed_size=10, cell_form=cell_form,
                   rng=np.random.default_rng(1), dtype=np.float64)
    tensors = lambda arrays: [torch.tensor(a, requires_grad=True) for a in arrays]  # noqa: E731
    p = {"E": tensors([model.embed.W])[0], "U": tensors([l.U for l in model.layers]),
         "W": tensors([l.W for l in model.layers]), "b": tensors([l.b for l in model.layers]),
         "U_top": tensors([model.layers[0].U_top]), "embed_W": tensors(model.output.embed_W)}
    p.update({k: tensors([getattr(model.output, k)])[0]
              for k in ("gate_W", "gate_b", "embed_b", "out_W", "out_b")})
    leaves = [v for value in p.values() for v in (value if isinstance(value, list) else [value])]
    torch_opt = torch.optim.Adam(leaves, lr=lr, eps=1e-8)
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(lr=lr)), model)
    state = model.initial_state(B)
    torch_state = [[torch.zeros(B, l.hidden, dtype=torch.float64) for l in model.layers] for _ in "ch"] + \
        [[torch.zeros(B, 1, dtype=torch.float64) for _ in model.layers]]
    ours, theirs = [], []
    for step in range(steps):
        x, y = streams[:, step * T:(step + 1) * T], streams[:, step * T + 1:(step + 1) * T + 1]
        (loss, state, z), (grads,) = mf.withgradient(lambda m: lm_loss(m, state, x, y), model)
        mf.optim.update(opt, model, grads)
        logits, torch_state, torch_z = paper_hmlstm(torch, p, torch.tensor(x), torch_state, 1.0, cell_form)
        torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, len(symbols)),
                                                       torch.tensor(y).reshape(-1))
        torch_opt.zero_grad()
        torch_loss.backward()
        norm = float(torch.sqrt(sum((q.grad ** 2).sum() for q in leaves)))
        for q in leaves:
            q.grad *= 1.0 / norm if norm > 1.0 else 1.0
        torch_opt.step()
        torch_state = [[v.detach() for v in part] for part in torch_state]
        ours.append((float(loss), float(np.mean(z))))
        theirs.append((float(torch_loss.detach()), float(torch_z.mean())))
    ours, theirs = np.array(ours), np.array(theirs)
    np.testing.assert_array_equal(ours[:, 1], theirs[:, 1])         # the z rate, step by step
    np.testing.assert_allclose(ours[:, 0], theirs[:, 0], rtol=1e-7)
    assert np.ptp(ours[:, 1]) > 0.05 and ours[-1, 0] < ours[0, 0] - 0.3  # it moved: the test can tell


@pytest.mark.slow
@pytest.mark.parametrize("cell_form", ["blend"])  # the default form; the branch form takes as long again
def test_a_small_hmlstm_learns_to_segment_words(cell_form):
    """300 steps on sentences of words: layer 1's rate stays between 5% and 95% at every step, and on
    held-out text it starts a new segment (flushes, after z = 1 on the character before) more often on
    word-first letters than on any other character."""
    from minflux_models import rates_by_position
    from minflux_models.boundaries import positions_in_words

    text = word_text(6000)
    symbols = sorted(set(text))
    ids = np.array([symbols.index(ch) for ch in text])
    model = HMLSTM(len(symbols), embed_size=16, hidden_sizes=(48, 48), output_embed_size=48,
                   cell_form=cell_form, rng=np.random.default_rng(0))
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(lr=0.005)), model)
    B, T = 16, 40
    streams = ids[:len(ids) // B * B].reshape(B, -1)
    windows = (streams.shape[1] - 1) // T
    state, rates = model.initial_state(B), []
    for step in range(300):
        w = step % windows
        if w == 0:
            state = model.initial_state(B)
        x, y = streams[:, w * T:(w + 1) * T], streams[:, w * T + 1:(w + 1) * T + 1]
        (loss, state, z), (grads,) = mf.withgradient(lambda m: lm_loss(m, state, x, y), model)
        mf.optim.update(opt, model, grads)
        rates.append(float(np.mean(z)))
    assert 0.05 <= min(rates) and max(rates) <= 0.95, rates
    held_out = word_text(1500, seed=1)
    tokens = np.array([symbols.index(ch) for ch in held_out])
    with mf.no_grad():
        _, _, z = model(tokens[None, :-1], model.initial_state(1))
    flushes = np.concatenate([[0.0], np.asarray(z)[0, :-1, 0]])[:, None]
    rows = rates_by_position(flushes, positions_in_words(held_out[:-1]))
    first = next(rates[0] for label, _, rates in rows if label == "letter 1")
    assert all(first > rates[0] for label, _, rates in rows if label != "letter 1"), rows
