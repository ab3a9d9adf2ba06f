"""The whole stack on CuPy, compared with the same computation in numpy on the CPU.

Every test carries the ``gpu`` marker and is skipped without CuPy and a CUDA device (see
conftest.py). Computations run in float64 where a comparison must be tight; the GPU result is
copied back with `mf.to_numpy` only after the computation.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf

try:
    import cupy
except ImportError:  # the tests below are skipped without CuPy
    cupy = None

pytestmark = pytest.mark.gpu


def on_gpu(tree):
    return mf.to_device(tree, "gpu")


def host(tree):
    return mf.tree.map_arrays(mf.to_numpy, tree, trainable_only=False)


def assert_tree_close(gpu_tree, cpu_tree, rtol=1e-9, atol=1e-12):
    got = dict(mf.tree.named_leaves(gpu_tree, trainable_only=False))
    want = dict(mf.tree.named_leaves(cpu_tree, trainable_only=False))
    assert got.keys() == want.keys()
    for name, value in got.items():
        assert isinstance(value, cupy.ndarray), f"{name} left the device"
        np.testing.assert_allclose(mf.to_numpy(value), want[name], rtol=rtol, atol=atol, err_msg=name)


def gradient_both(f, *args):
    """``mf.withgradient(f, ...)`` on the CPU arrays and on their GPU copies."""
    cpu = mf.withgradient(f, *args)
    gpu = mf.withgradient(f, *on_gpu(args))
    return cpu, gpu


# -- the scalar-function compiler's CUDA backend -----------------------------------------------------

from minflux_models.cells import cell_update  # noqa: E402  (the paper's benchmark kernel)


@mf.elementwise
def halvings(x, limit):
    n = 0.0
    while abs(x) > limit:
        x = x / 2
        n += 1
        if n > 40:
            break
    return x * n / limit, n


@mf.scalar_rule(lambda m, x, a, y: m.where(abs(x) * a < 1.0, a / 2, 0.0))
def step(x, a):
    return 1.0 if x > 0 else 0.0


@mf.elementwise
def gated(x, a, n):
    total = 0.0
    for k in range(n):
        total = total + step(x - k, a) * mf.exp(-x * k)
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cell_update_outputs_and_gradients_match_numpy(rng, dtype):
    z = (rng.random((6, 1)) < 0.5).astype(dtype)
    zb = (rng.random((6, 1)) < 0.5).astype(dtype)
    c, f, i, g = (rng.standard_normal((6, 5)).astype(dtype) for _ in range(4))

    def loss(c, f, i, g, z, zb):
        return mf.sum(cell_update(z, zb, c, f, i, g) * mf.tanh(c))

    (cpu_value, cpu_grads), (gpu_value, gpu_grads) = gradient_both(loss, c, f, i, g, z, zb)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(mf.to_numpy(gpu_value), cpu_value, rtol=tol)
    for got, want in zip(gpu_grads[:4], cpu_grads[:4]):
        assert isinstance(got, cupy.ndarray) and got.dtype == dtype
        np.testing.assert_allclose(mf.to_numpy(got), want, rtol=tol, atol=tol)


def test_loops_scalar_rules_int_arguments_and_broadcast_gradients(rng):
    x = rng.standard_normal((4, 3)) * 50
    limit = np.abs(rng.standard_normal((4, 1))) + 0.5          # (n, 1): its gradient is reduced
    (cpu_v, cpu_g), (gpu_v, gpu_g) = gradient_both(
        lambda x, limit: mf.sum(halvings(x, limit)[0] * halvings(x, limit)[1]), x, limit)
    np.testing.assert_allclose(mf.to_numpy(gpu_v), cpu_v, rtol=1e-12)
    assert gpu_g[1].shape == (4, 1)
    for got, want in zip(gpu_g, cpu_g):
        np.testing.assert_allclose(mf.to_numpy(got), want, rtol=1e-12, atol=1e-12)
    xs = np.linspace(-2, 3, 11)
    cpu = mf.withgradient(lambda x: mf.sum(gated(x, 2.0, 3)), xs)
    gpu = mf.withgradient(lambda x: mf.sum(gated(x, 2.0, 3)), on_gpu(xs))
    np.testing.assert_allclose(mf.to_numpy(gpu[1][0]), cpu[1][0], rtol=1e-12, atol=1e-12)


def test_untaken_branch_never_leaks_nan_on_the_gpu():
    xs = on_gpu(np.array([-4.0, -1.0, 4.0]))
    g = mf.gradient(lambda x: mf.sum(mf.broadcast(lambda x: x if x < 0 else mf.sqrt(x), x)), xs)[0]
    np.testing.assert_array_equal(mf.to_numpy(g), [1.0, 1.0, 0.25])


def test_fast_math_kernels_stay_close_to_the_accurate_ones(rng):
    from minflux.compiler import cuda_backend

    args = on_gpu([(rng.random((64, 1)) < 0.5).astype(np.float32), (rng.random((64, 1)) < 0.5).astype(np.float32)]
                  + [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(4)])
    accurate = cell_update(*args)
    cuda_backend.set_fast_math(True)
    try:
        fast = mf.broadcast(lambda z, zb, c, f, i, g: cell_update(z, zb, c, f, i, g), *args)
    finally:
        cuda_backend.set_fast_math(False)
    np.testing.assert_allclose(mf.to_numpy(fast), mf.to_numpy(accurate), rtol=2e-5, atol=2e-6)


def test_mixing_numpy_and_cupy_arguments_names_the_fix():
    with pytest.raises(mf.DeviceError, match=r"cell_update.*numpy.ndarray.*cupy.ndarray.*mf.to_device"):
        cell_update(np.zeros((2, 1)), on_gpu(np.zeros((2, 1))), np.zeros((2, 2)), np.zeros((2, 2)),
                    np.zeros((2, 2)), np.zeros((2, 2)))


# -- structural ops, layers, optimisers, checkpoints, data -----------------------------------------

def test_structural_ops_gradients_match(rng):
    w = rng.standard_normal((5, 4))
    x = rng.standard_normal((3, 6, 5))
    table = rng.standard_normal((7, 5))
    ids = np.array([[1, 2, 2], [6, 0, 1]])
    targets = np.array([0, 3, 1, 2, 2, 1])

    def loss(w, x, table):
        h = mf.tanh(x @ w)                                   # matmul, batched
        parts = mf.split(h, [1, 3], axis=1)
        joined = mf.concatenate([parts[2], parts[0]], axis=1)
        steps = mf.unstack(joined, axis=1)
        stacked = mf.stack(steps[::-1], axis=0)
        emb = mf.take(table, ids, axis=0)                    # repeated ids scatter-add
        logits = mf.reshape(stacked[:2], (-1, 4)) + mf.reshape(emb @ w, (-1, 4))[:6]
        picked = x[:, np.array([0, 0, 5])]                   # integer-array index, repeats
        return (mf.cross_entropy(logits, targets) + mf.mean(mf.softmax(logits, axis=0))
                + mf.sum(mf.max(picked, axis=2)) * 0.1 + mf.sum(mf.logsumexp(h, axis=-1)) * 0.01
                + mf.sum(mf.log_softmax(h, axis=1)[:, 1:3]) * 0.01 + mf.min(x) * 0.5)

    (cpu_value, cpu_grads), (gpu_value, gpu_grads) = gradient_both(loss, w, x, table)
    np.testing.assert_allclose(mf.to_numpy(gpu_value), cpu_value, rtol=1e-10)
    for got, want in zip(gpu_grads, cpu_grads):
        assert isinstance(got, cupy.ndarray)
        np.testing.assert_allclose(mf.to_numpy(got), want, rtol=1e-9, atol=1e-12)


def small_language_model(rng):
    return mf.nn.Chain(mf.nn.Embedding(11, 6, rng=rng, dtype=np.float64),
                       mf.nn.Recurrence(mf.nn.LSTMCell(6, 8, rng=rng, dtype=np.float64)))


def test_layers_forward_and_gradient_match(rng):
    model = small_language_model(rng)
    head = mf.nn.Chain(mf.nn.LayerNorm(8, dtype=np.float64), mf.nn.Dense(8, 11, rng=rng, dtype=np.float64))
    tokens = rng.integers(0, 11, size=(5, 3))

    def loss(parts, tokens):
        model, head = parts
        outputs, _ = model(tokens)
        logits = mf.stack([head(h) for h in outputs], axis=0)
        return mf.cross_entropy(logits, np.roll(tokens, -1, axis=0) if isinstance(tokens, np.ndarray)
                                else cupy.roll(tokens, -1, axis=0))

    cpu = mf.withgradient(loss, (model, head), tokens)
    gpu = mf.withgradient(loss, on_gpu((model, head)), on_gpu(tokens))
    np.testing.assert_allclose(mf.to_numpy(gpu[0]), cpu[0], rtol=1e-10)
    assert_tree_close(gpu[1][0], cpu[1][0], rtol=1e-8, atol=1e-10)


def test_dropout_masks_are_made_on_the_device():
    drop = mf.nn.Dropout(0.5, rng=np.random.default_rng(0), active=True)
    y = drop(on_gpu(np.ones((100, 100), np.float32)))
    assert isinstance(y, cupy.ndarray)
    values = set(np.unique(mf.to_numpy(y)).tolist())
    assert values == {0.0, 2.0}


RULES = [lambda: mf.optim.Descent(0.1), lambda: mf.optim.Momentum(0.1, 0.9),
         lambda: mf.optim.Nesterov(0.1, 0.9), lambda: mf.optim.RMSProp(0.01), lambda: mf.optim.AdaGrad(0.1),
         lambda: mf.optim.Adam(0.01), lambda: mf.optim.AdamW(0.01),
         lambda: mf.optim.chain(mf.optim.ClipNorm(0.5), mf.optim.WeightDecay(1e-3), mf.optim.Adam(0.01)),
         lambda: mf.optim.chain(mf.optim.ClipValue(0.1), mf.optim.Descent(0.1))]


@pytest.mark.parametrize("make_rule", RULES)
def test_optimiser_updates_match(rng, make_rule):
    model = {"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)}
    grads = [{"W": rng.standard_normal((4, 3)), "b": rng.standard_normal(3)} for _ in range(3)]
    gpu_model = on_gpu(model)
    cpu_state, gpu_state = mf.optim.setup(make_rule(), model), mf.optim.setup(make_rule(), gpu_model)
    for g in grads:
        mf.optim.update(cpu_state, model, g)
        mf.optim.update(gpu_state, gpu_model, on_gpu(g))
    assert_tree_close(gpu_model, model, rtol=1e-10, atol=1e-12)


def test_checkpoints_go_through_the_host_and_load_back_onto_the_device(rng, tmp_path):
    model = on_gpu(small_language_model(rng))
    state = mf.optim.setup(mf.optim.Adam(0.01), model)
    grads = mf.tree.map_arrays(lambda a: a * 0.5 + 1, model, trainable_only=False)
    mf.optim.update(state, model, grads)
    path = mf.save(tmp_path / "c.h5", model=model, opt_state=state, step=3)
    fresh = on_gpu(small_language_model(np.random.default_rng(99)))
    fresh_state = mf.optim.setup(mf.optim.Adam(0.01), fresh)
    meta = mf.load(path, model=fresh, opt_state=fresh_state)
    assert meta["step"] == 3
    assert_tree_close(fresh, host(model), rtol=0, atol=0)
    for (_, a), (_, b) in zip(mf.optim.named_state_leaves(fresh_state), mf.optim.named_state_leaves(state)):
        assert isinstance(a.state[0], cupy.ndarray)
        np.testing.assert_array_equal(mf.to_numpy(a.state[0]), mf.to_numpy(b.state[0]))


def test_batches_and_the_device_setting():
    from minflux.device import resolve_device

    x, y = on_gpu((np.arange(6).reshape(2, 3), np.ones(2)))
    assert isinstance(x, cupy.ndarray) and isinstance(y, cupy.ndarray)
    assert resolve_device("auto") == "gpu" and resolve_device("gpu") == "gpu"
    back = mf.to_device({"x": x}, "cpu")["x"]
    assert isinstance(back, np.ndarray) and back.tolist() == [[0, 1, 2], [3, 4, 5]]


# -- no host round trip inside a training step ---------------------------------------------------------

def test_the_transfer_guard_sees_cupy_host_copies():
    x = on_gpu(np.arange(4.0))
    with mf.no_host_transfers():
        y = (x * 2).sum()                       # stays on the device
    assert float(y) == 12.0                     # outside the guard a host read is fine
    for read in (lambda: float(y), lambda: y.item(), lambda: mf.to_numpy(x), lambda: bool(y > 0)):
        with pytest.raises(mf.HostTransferError):
            with mf.no_host_transfers():
                read()


def hmlstm_training_step(dtype=np.float32):
    from minflux_models import HMLSTM

    rng = np.random.default_rng(0)
    model = on_gpu(HMLSTM(13, embed_size=8, hidden_sizes=(16, 16, 16), rng=rng, dtype=dtype))
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0, throw=False), mf.optim.Adam(0.002)), model)
    tokens = rng.integers(0, 13, size=(4, 11))
    x, y = on_gpu((tokens[:, :-1], tokens[:, 1:]))
    state = model.initial_state(4)

    def loss_fn(m, state):
        logits, new_state, boundaries = m(x, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, 13)), mf.reshape(y, (-1,))), new_state, boundaries

    def step(state):
        (loss, new_state, boundaries), (grads, _) = mf.withgradient(loss_fn, model, state)
        mf.optim.update(opt, model, grads)
        return loss, new_state

    return model, step, state


def test_hmlstm_training_step_makes_no_host_round_trip():
    from minflux.transfer_guard import _cupy_sync_detector

    assert _cupy_sync_detector() is not None, "this CuPy has no synchronisation detector to guard with"
    model, step, state = hmlstm_training_step()
    loss, state = step(state)                   # compiles the kernels
    assert np.isfinite(float(loss))
    with mf.no_host_transfers():
        loss, state = step(state)
        loss, state = step(state)
    assert isinstance(loss, cupy.ndarray) and all(isinstance(s["c"], cupy.ndarray) for s in state)


def test_hmlstm_gradient_on_the_gpu_matches_the_cpu():
    from minflux_models import HMLSTM

    rng = np.random.default_rng(1)
    model = HMLSTM(9, embed_size=5, hidden_sizes=(6, 4), rng=rng, dtype=np.float64)
    tokens = rng.integers(0, 9, size=(3, 7))
    state = model.initial_state(3)
    state[0]["z"][:] = [[1.0], [0.0], [1.0]]

    def loss(m, tokens, state):
        logits, _, _ = m(tokens[:, :-1], state)
        return mf.cross_entropy(mf.reshape(logits, (-1, 9)), mf.reshape(tokens[:, 1:], (-1,)))

    cpu = mf.withgradient(loss, model, tokens, state)
    gpu = mf.withgradient(loss, on_gpu(model), on_gpu(tokens), on_gpu(state))
    np.testing.assert_allclose(mf.to_numpy(gpu[0]), cpu[0], rtol=1e-10)
    assert_tree_close(gpu[1][0], cpu[1][0], rtol=1e-7, atol=1e-10)
