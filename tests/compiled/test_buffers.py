"""A replay's buffers: intermediates written into memory allocated once, reused only when no live
array may share it, never handed to the caller or to a function that might keep it."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import minflux as mf
from minflux.schedule import Recording, Replay
from minflux.schedule.buffers import NEW, OUT, VIEWS, kind
from minflux.schedule.operation import declared
from minflux.schedule.recorder import Declared
from minflux.schedule.replay import COMPILE_AFTER
from minflux.schedule.traced import _method_caller

N = 1000
pytestmark = pytest.mark.usefixtures("replays_counted_not_timed")


def recorded(fn, x):
    """The `Replay` of ``fn`` recorded on ``x`` and the slots of its intermediates in order."""
    rec = Recording("f")
    out = fn(rec.input(x.copy()))
    replay = Replay(rec, [out.slot])
    rec.close()
    return replay


def both_forms(replay, inputs):
    """The replay's result in its program form (new arrays throughout), then in its compiled form
    (which plans the buffers)."""
    first = replay([inputs.copy()])[0]
    while replay.replays < COMPILE_AFTER:
        replay([inputs.copy()])
    assert replay.buffers.nbytes == 0
    return first, replay([inputs.copy()])[0]


def test_buffers_whose_lives_do_not_overlap_share_memory():
    def chain(x):
        a = np.exp(x)        # step 0: dies at step 1
        b = a + 1.0          # step 1: lives to step 2, so it cannot take a's memory
        c = b * 2.0          # step 2: takes a's memory
        return c - 3.0       # step 3: the result, new on every call

    replay = recorded(chain, np.zeros(N))
    x = np.linspace(-1.0, 1.0, N)
    results = both_forms(replay, x)
    outs = replay.buffers.outs
    assert sorted(outs) == [0, 1, 2]
    assert np.shares_memory(outs[0], outs[2]) and not np.shares_memory(outs[0], outs[1])
    assert replay.buffers.nbytes <= 2 * 8 * N + 64
    for got in results:
        np.testing.assert_array_equal(got, (np.exp(x) + 1.0) * 2.0 - 3.0)
        assert not any(np.shares_memory(got, o) for o in outs.values())


def test_the_buffers_are_planned_once_with_the_straight_line_function_and_announced():
    rec = Recording("f")
    y = np.exp(rec.input(np.zeros(N))) * 2.0
    told = []
    replay = Replay(rec, [y.slot], after_planning=told.append)
    rec.close()
    results = both_forms(replay, np.ones(N))
    replay([np.ones(N)])
    assert told == [replay.buffers] and sorted(replay.buffers.outs) == [0]
    for got in results:
        np.testing.assert_array_equal(got, np.exp(np.ones(N)) * 2.0)


def test_a_view_keeps_its_base_buffer_alive_until_the_view_is_last_used():
    def viewed(x):
        a = np.exp(x)
        v = a[::-1]             # a's last direct use; the view lives on
        n = np.negative(x)      # would take a's memory if the view were not followed
        return v + n

    replay = recorded(viewed, np.zeros(N))
    x = np.linspace(-1.0, 1.0, N)
    for got in both_forms(replay, x):
        np.testing.assert_array_equal(got, np.exp(x)[::-1] - x)
    a, n = replay.buffers.outs[0], replay.buffers.outs[2]
    assert not np.shares_memory(a, n)


def test_an_array_an_undeclared_operation_sees_gets_memory_of_its_own_on_every_call():
    kept = []

    @mf.operation
    def keep(a):
        kept.append(a)
        return a + 0.0

    replay = recorded(lambda x: keep(np.exp(x)) * 2.0, np.zeros(N))
    replay.source
    assert 0 not in replay.buffers.outs
    inputs = [np.full(N, 1.0), np.full(N, 2.0)]
    for _ in range(COMPILE_AFTER):
        replay([inputs[0]])
    for x in inputs:
        replay([x])
    np.testing.assert_array_equal(kept[-2], np.exp(inputs[0]))
    np.testing.assert_array_equal(kept[-1], np.exp(inputs[1]))


def test_a_compiled_step_returns_new_arrays_on_every_call():
    step = mf.compile(lambda x: mf.tanh(mf.exp(x) * 2.0) + 1.0)
    x1, x2 = np.linspace(-1, 1, N), np.linspace(0, 2, N)
    results = [step(x1) for _ in range(3)] + [step(x2) for _ in range(3)]
    expected = [np.tanh(np.exp(x) * 2.0) + 1.0 for x in (x1, x2)]
    for r, e in zip(results, [expected[0]] * 3 + [expected[1]] * 3):
        np.testing.assert_array_equal(r, e)
    assert not any(np.shares_memory(a, b) for k, a in enumerate(results) for b in results[k + 1:])


def test_kernel_outputs_and_products_are_written_into_buffers_and_match_eager_to_the_bit():
    def clipped(x):
        return x * 0.5 if x > 0.0 else -x

    def loss_and_grads(w, x):
        return mf.withgradient(lambda w: mf.sum(mf.broadcast(clipped, mf.tanh(x @ w)) * 3.0), w)

    rng = np.random.default_rng(0)
    w, xs = rng.normal(size=(16, 16)), [rng.normal(size=(32, 16)) for _ in range(8)]
    step = mf.compile(loss_and_grads)
    for x in xs:
        expected_loss, (expected_grad,) = loss_and_grads(w, x)
        loss, (grad,) = step(w, x)
        assert np.asarray(loss).tobytes() == np.asarray(expected_loss).tobytes()
        assert grad.tobytes() == expected_grad.tobytes()
    source = step.schedule(w, xs[0])
    assert source.count("out=") >= 2 and step.buffer_bytes > 0


def test_a_kernel_with_a_data_dependent_loop_writes_its_results_but_not_its_loop_flag_into_buffers():
    def newton_sqrt(x):
        y = x
        while abs(y * y - x) > 1e-12 * x:
            y = 0.5 * (y + x / y)
        return y

    def loss_and_grads(w, x):
        return mf.withgradient(lambda w: mf.sum(mf.broadcast(newton_sqrt, w * x + 2.0) * 3.0), w)

    rng = np.random.default_rng(1)
    w, step = rng.uniform(1.0, 2.0, size=(16, 16)), mf.compile(loss_and_grads)
    for _ in range(COMPILE_AFTER + 4):
        x = rng.uniform(1.0, 2.0, size=(16, 16))
        expected_loss, (expected_grad,) = loss_and_grads(w, x)
        loss, (grad,) = step(w, x)
        assert np.asarray(loss).tobytes() == np.asarray(expected_loss).tobytes()
        assert grad.tobytes() == expected_grad.tobytes()
    np.testing.assert_allclose(grad, 3.0 * x / (2.0 * np.sqrt(w * x + 2.0)), rtol=1e-9)
    assert step.buffer_bytes > 0 and step.schedule(w, x).count("out=") >= 2


def test_two_threads_replaying_one_step_never_share_its_buffers_at_once():
    step = mf.compile(lambda x: mf.sum(mf.tanh(x * 2.0) * mf.exp(-x)))
    inputs = [np.full(200_000, v) for v in np.linspace(-1.0, 1.0, 8)]
    expected = [float(np.sum(np.tanh(x * 2.0) * np.exp(-x))) for x in inputs]
    step(inputs[0]), step(inputs[0])
    wrong = []

    def work(order):
        for _ in range(10):
            for k in order:
                if float(step(inputs[k])) != expected[k]:
                    wrong.append(k)

    threads = [threading.Thread(target=work, args=(o,)) for o in (range(8), range(7, -1, -1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert step.buffer_bytes > 0 and wrong == []


def sums_of_a_product(x):
    y = np.multiply(x, 2.0)
    whole, columns, rows = y.sum(), y.sum(axis=0), y.sum(axis=1, keepdims=True)
    return np.multiply(columns, whole), np.add(rows, y[:, 0].sum()), whole


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.bool_])
def test_sums_along_axes_are_written_into_buffers_and_whole_sums_stay_numpy_scalars(dtype):
    """``ndarray.sum(axis=..., out=...)``: numpy's own reduction into the buffer, the same bits and type."""
    rng = np.random.default_rng(3)
    step = mf.compile(sums_of_a_product)
    for k in range(72):
        x = (rng.normal(size=(5, 300)) * 4).astype(dtype)
        got, want = step(x), sums_of_a_product(x)
        assert [(type(a), a.dtype, a.shape, a.tobytes()) for a in got] == \
            [(type(a), a.dtype, a.shape, a.tobytes()) for a in want], f"call {k}"
    assert step.buffer_bytes > 0


@pytest.mark.parametrize("call, expected", [
    ((np.add, (1, 2), {}), OUT),
    ((np.add, (1, 2), {"out": 3}), VIEWS),          # writes into a given array and returns it
    ((np.divmod, (1, 2), {}), NEW),                 # two results: new, not planned
    ((np.add, (1, 2), {"where": True}), VIEWS),
    ((np.concatenate, ([1],), {}), OUT),
    ((np.concatenate, ([1],), {"dtype": float}), NEW),
    ((np.reshape, (1, 2), {}), VIEWS),
    ((_method_caller("sum"), (1,), {}), OUT),
    ((np.einsum, ("ij->ji", 1), {}), VIEWS),        # may return a view
    ((print, (), {}), None),                         # unknown: its arrays are never planned
])
def test_what_the_planner_knows_of_a_function(call, expected):
    assert kind(*call) == expected


def test_an_operation_declares_its_results_or_is_refused():
    @mf.operation(results="views", views_of=("b",))
    def second(a, b):
        return b

    assert declared(second) == Declared(VIEWS, ((1,), ("b",)))
    assert vars(second.__wrapped_operation__) == {}   # the function itself is left as it was
    with pytest.raises(ValueError, match="results must be 'new', 'views' or 'out'"):
        mf.operation(results="fresh")(lambda a: a)
    with pytest.raises(ValueError, match=r"views_of names \['c'\], which second does not take"):
        mf.operation(results="views", views_of=("c",))(second.__wrapped_operation__)
