"""Every shipped model trained by a compiled step gives the eager step's numbers to the last bit.

Each case trains two copies of one model from the same seed for 20 steps with Adam and a throwing
global-norm clip, one eagerly and one through `mf.compile`, and compares the loss, the carried
recurrent state, every parameter and every optimiser state array bit for bit after every step. Here
a replay is compiled into its straight-line form after five replays (64 by default), so each case
compares both forms of the replay with the eager step.

Every case runs with numba kernels. The HM-LSTM's, the LSTMs' and the GRU's kernels are large and take
numba a while to compile: those cases are marked slow and also run on the numpy backend, as do the
tests of recording and replay after them, so the quick subset records and replays every model.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux_models import HMLSTM, LSTMLM

VOCAB, BATCH, STEPS, TIME = 11, 4, 20, 6


@pytest.fixture(autouse=True)
def compile_after_five_replays(monkeypatch):
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", 5)


def train_step(model, opt_state, carry, x, y, loss_fn):
    (loss, new_carry), (grads,) = mf.withgradient(lambda m: loss_fn(m, carry, x, y), model)
    mf.optim.update(opt_state, model, grads)
    return loss, new_carry


def language_model_loss(model, carry, x, y):
    logits, new_state, _ = model(x, carry)
    return mf.cross_entropy(logits, y), new_state


def dense_loss(model, carry, x, y):
    return mf.mse(model(x), y), carry


class GatedLayer:
    """The README's custom layer: plain arrays, and a scalar function that branches on the data."""

    def __init__(self, rng):
        self.W = rng.normal(size=(3, 5)) * 0.5
        self.b = np.zeros(5)

    def __call__(self, x):
        return leaky_or_square(x @ self.W + self.b)


@mf.elementwise
def leaky_or_square(u):
    if u > 0.25:
        return u * u
    elif u < -1.0:
        return 0.1 * u
    return u


def gated_loss(model, carry, x, y):
    return mf.mean(mf.square(model(x) - y)), carry


def recurrent_loss(kind):
    def loss(model, carry, x, y):
        cell, head = model["cell"], model["head"]
        state, total = carry, 0.0
        for t in range(x.shape[1]):
            h, state = cell(x[:, t], state)
            total = total + mf.mean(mf.square(head(h) - y[:, t]))
        return total / x.shape[1], state
    loss.__name__ = f"{kind}_loss"
    return loss


def tokens(rng, batch=BATCH):
    data = rng.integers(0, VOCAB, (batch, TIME + 1))
    return data[:, :-1], data[:, 1:]


def build(case: str, seed: int = 0):
    """(model, optimiser state, carried state, loss function, batches) for one case."""
    rng = np.random.default_rng(seed)
    data = np.random.default_rng(seed + 100)
    if case.startswith("hmlstm"):
        _, form, norm = case.split("-")
        model = HMLSTM(VOCAB, embed_size=8, hidden_sizes=(6, 5, 4), cell_form=form, layer_norm=norm == "ln",
                       slope=1.0, rng=rng)
        carry, loss_fn = model.initial_state(BATCH), language_model_loss
        batches = [tokens(data) for _ in range(STEPS)]
    elif case == "lstm":
        model = LSTMLM(VOCAB, embed_size=8, hidden_sizes=(6, 5), rng=rng)
        carry, loss_fn = model.initial_state(BATCH), language_model_loss
        batches = [tokens(data) for _ in range(STEPS)]
    elif case in ("lstm-cell", "gru-cell"):
        cell = (mf.nn.LSTMCell if case == "lstm-cell" else mf.nn.GRUCell)(3, 5, rng=rng)
        model = {"cell": cell, "head": mf.nn.Dense(5, 2, rng=rng)}
        carry, loss_fn = cell.initial_state(BATCH), recurrent_loss(case)
        batches = [(data.normal(size=(BATCH, TIME, 3)).astype(np.float32),
                    data.normal(size=(BATCH, TIME, 2)).astype(np.float32)) for _ in range(STEPS)]
    elif case == "dense-chain":
        model = mf.nn.Chain(mf.nn.Dense(3, 8, mf.tanh, rng=rng), mf.nn.Dense(8, 8, mf.relu, rng=rng),
                            mf.nn.Dense(8, 2, rng=rng))
        carry, loss_fn = (), dense_loss
        batches = [(data.normal(size=(16, 3)), data.normal(size=(16, 2))) for _ in range(STEPS)]
    else:
        model = GatedLayer(rng)
        carry, loss_fn = (), gated_loss
        batches = [(data.normal(size=(64, 3)), data.normal(size=(64, 5))) for _ in range(STEPS)]
    rule = mf.optim.chain(mf.optim.ClipNorm(1.0, throw=True), mf.optim.Adam(lr=0.05))
    return model, mf.optim.setup(rule, model), carry, loss_fn, batches


def bits(a) -> tuple:
    a = np.asarray(a)
    return a.shape, a.dtype.str, a.tobytes()


def arrays_of(model, opt_state) -> list:
    named = [(name, leaf) for name, leaf in mf.tree.named_leaves(model, trainable_only=False)]
    for name, leaf in mf.optim.named_state_leaves(opt_state):
        named += [(f"{name}.state.{i}", a) for i, a in enumerate(mf.tree.leaves(leaf.state, False))]
    return named


def assert_same(eager, compiled, what):
    assert len(eager) == len(compiled), what
    for (name, a), (other, b) in zip(eager, compiled):
        assert name == other
        assert bits(a) == bits(b), f"{what}: {name} differs"


CASES = ["hmlstm-branch-plain", "hmlstm-blend-plain", "hmlstm-branch-ln", "hmlstm-blend-ln", "lstm",
         "lstm-cell", "gru-cell", "dense-chain", "gated-layer"]
SLOW_ON_NUMBA = [case for case in CASES if case.startswith("hmlstm")] + ["lstm", "lstm-cell", "gru-cell"]
NUMBA = [pytest.param(case, "numba", marks=[pytest.mark.slow] if case in SLOW_ON_NUMBA else []) for case in CASES]
NUMPY = [pytest.param(case, "numpy", marks=[pytest.mark.slow] if case in ("hmlstm-blend-plain", "hmlstm-branch-ln")
                       else []) for case in SLOW_ON_NUMBA]   # each form and each norm once in the quick subset


@pytest.mark.parametrize("case, backend", NUMBA + NUMPY, indirect=["backend"])
def test_compiled_training_equals_eager_to_the_bit(case, backend):
    model, opt_state, carry, loss_fn, batches = build(case)
    twin, twin_state, twin_carry, _, _ = build(case)
    step = mf.compile(train_step)
    losses = []
    for k, (x, y) in enumerate(batches):
        loss, carry = train_step(model, opt_state, carry, x, y, loss_fn)
        twin_loss, twin_carry = step(twin, twin_state, twin_carry, x, y, loss_fn)
        assert bits(loss) == bits(twin_loss), f"step {k}: the loss differs"
        assert_same(list(mf.tree.named_leaves(carry, False)), list(mf.tree.named_leaves(twin_carry, False)),
                    f"step {k}: the carried state")
        assert_same(arrays_of(model, opt_state), arrays_of(twin, twin_state), f"step {k}")
        losses.append(float(loss))
    assert step.recordings == 1 and step.replays >= STEPS - 3, (step.recordings, step.replays)
    (entry,) = step._entries.values()
    assert entry.replay._compiled is not None        # the last replays ran the straight-line form
    start, start_state = build(case)[:2]
    moved = [name for (name, a), (_, b) in zip(arrays_of(start, start_state), arrays_of(twin, twin_state))
             if bits(a) != bits(b)]
    assert len(moved) > len(arrays_of(start, start_state)) // 2   # it trained: the parameters moved


@pytest.mark.numpy_kernels  # the HM-LSTM's kernels on numba: the slow cases above
def test_hmlstm_boundaries_change_between_replayed_steps():
    model, opt_state, carry, loss_fn, batches = build("hmlstm-branch-plain")
    step = mf.compile(lambda m, s, c, x, y: train_step(m, s, c, x, y, loss_fn)[1])
    rates = []
    for x, y in batches:
        carry = step(model, opt_state, carry, x, y)
        rates.append(tuple(float(layer["z"].mean()) for layer in carry[:-1]))
    assert len(set(rates[5:])) > 3           # replays follow the data: the boundaries differ by step


@pytest.mark.numpy_kernels  # the HM-LSTM's kernels on numba: the slow cases above
def test_a_smaller_last_batch_records_a_second_schedule_and_both_replay():
    model, opt_state, carry, loss_fn, batches = build("hmlstm-blend-ln")
    twin, twin_state, _, _, _ = build("hmlstm-blend-ln")
    step = mf.compile(train_step)
    for x, y in batches[:4] + [(x[:3], y[:3]) for x, y in batches[4:8]] + batches[8:12]:
        start = model.initial_state(x.shape[0])
        loss = train_step(model, opt_state, start, x, y, loss_fn)[0]
        assert bits(step(twin, twin_state, start, x, y, loss_fn)[0]) == bits(loss)
    assert step.recordings == 2
    assert_same(arrays_of(model, opt_state), arrays_of(twin, twin_state), "after both shapes")


@pytest.mark.numpy_kernels  # the HM-LSTM's kernels on numba: the slow cases above
def test_training_resumed_from_a_checkpoint_replays_the_same_steps(tmp_path):
    model, opt_state, carry, loss_fn, batches = build("hmlstm-branch-ln")
    step = mf.compile(train_step)
    resumed, resumed_state, resumed_carry, _, _ = build("hmlstm-branch-ln", seed=7)   # other weights
    for k, (x, y) in enumerate(batches):
        if k == 10:
            mf.save(tmp_path / "run.h5", model=model, opt_state=opt_state)
            mf.load(tmp_path / "run.h5", model=resumed, opt_state=resumed_state)
            resumed_carry = carry
        loss, carry = train_step(model, opt_state, carry, x, y, loss_fn)
        if k >= 10:
            again, resumed_carry = step(resumed, resumed_state, resumed_carry, x, y, loss_fn)
            assert bits(again) == bits(loss), f"step {k}"
    assert_same(arrays_of(model, opt_state), arrays_of(resumed, resumed_state), "after resuming")


@pytest.mark.numpy_kernels  # the HM-LSTM's kernels on numba: the slow cases above
def test_check_mode_replays_every_model_beside_the_eager_step():
    for case in ("hmlstm-blend-ln", "gru-cell", "gated-layer"):
        model, opt_state, carry, loss_fn, batches = build(case)
        step = mf.compile(train_step, check=True)
        for x, y in batches[:6]:
            _, carry = step(model, opt_state, carry, x, y, loss_fn)
        assert step.replays >= 3


_WITH_NUMPYS_PRODUCT = """
import numpy as np, minflux as mf
from minflux.runtime import gemm_provider
from tests.compiled.test_models_compiled import arrays_of, bits, build, train_step
import minflux.schedule.replay as replay
replay.COMPILE_AFTER = 3
assert gemm_provider.provider == "numpy"
for case in ("dense-chain", "hmlstm-branch-ln"):
    model, opt_state, carry, loss_fn, batches = build(case)
    twin, twin_state, twin_carry, _, _ = build(case)
    step = mf.compile(train_step)
    for x, y in batches[:8]:
        loss, carry = train_step(model, opt_state, carry, x, y, loss_fn)
        twin_loss, twin_carry = step(twin, twin_state, twin_carry, x, y, loss_fn)
        assert bits(loss) == bits(twin_loss), case
    assert [bits(a) for _, a in arrays_of(model, opt_state)] == [bits(a) for _, a in arrays_of(twin, twin_state)]
print("same bits")
"""


def test_with_numpys_product_compiled_training_equals_eager_to_the_bit():
    """The suite runs with whichever product library is installed; this runs numpy's in a child."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, MINFLUX_GEMM="numpy", MINFLUX_ELEMENTWISE="numpy")
    done = subprocess.run([sys.executable, "-c", _WITH_NUMPYS_PRODUCT], env=env, capture_output=True,
                          text=True, timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert done.returncode == 0 and done.stdout.strip() == "same bits", done.stderr[-2000:]


CALLS = 72


def trained_to_eagers_bits(case: str, seed: int):
    """A compiled training step of ``case`` after `CALLS` steps, each checked against the eager step
    to the bit (the loss, the weights and the optimiser's state)."""
    model, opt_state, carry, loss_fn, batches = build(case)
    twin, twin_state, twin_carry, _, _ = build(case)
    rng = np.random.default_rng(seed)
    step = mf.compile(train_step)
    for k in range(CALLS):
        x, y = batches[rng.integers(len(batches))]
        x, y = x.copy(), y.copy()   # new addresses on every call
        loss, carry = train_step(model, opt_state, carry, x, y, loss_fn)
        twin_loss, twin_carry = step(twin, twin_state, twin_carry, x, y, loss_fn)
        assert bits(loss) == bits(twin_loss), f"step {k}: the loss differs"
        assert [bits(a) for _, a in arrays_of(model, opt_state)] == \
            [bits(a) for _, a in arrays_of(twin, twin_state)], f"step {k}"
    assert step.recordings == 1
    return step
