"""A large kernel launch splits over threads, a cut product's shares and a native replay's steps of
commands run at once, only where their own first calls measured that faster, and give the same bits
either way."""
from __future__ import annotations

import time

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import numba_backend
from minflux.runtime.split_choice import TRIES


# each test launches functions of its own: a launcher keeps its choice (until a recheck, 100 calls on)
def scaled_tanh_for_slow_splits(x, b):
    return mf.tanh(x) * b + x


def scaled_tanh_for_slow_single_threads(x, b):
    return mf.tanh(x) * b + x


def gate_for_slow_splits(x, b):
    return mf.sigmoid(x) * b if x > 0 else mf.tanh(x)


def gate_for_slow_single_threads(x, b):
    return mf.sigmoid(x) * b if x > 0 else mf.tanh(x)


def slowed_pool(monkeypatch, module, slow: str) -> list:
    """``module``'s calls of the pool (``run_rows``) with two threads free, the way named ``slow``
    (``"split"`` or ``"one"``) taking 20 ms longer; returns the thread counts they asked for."""
    monkeypatch.setattr(module, "threads_now", lambda: 2)
    asked = []
    real = module.run_rows

    def run_rows(call, r0, r1, n_threads, args):
        asked.append(n_threads)
        if (n_threads > 1) == (slow == "split"):
            time.sleep(0.02)
        real(call, r0, r1, n_threads, args)

    monkeypatch.setattr(module, "run_rows", run_rows)
    return asked


def launches_with(monkeypatch, slow: str):
    """Every kernel launch of 32 rows split over two threads when asked, the way named ``slow``
    (``"split"`` or ``"one"``) taking 20 ms longer; returns the thread counts launches asked for."""
    monkeypatch.setattr(numba_backend, "PARALLEL_MIN_ELEMENTS", 16)
    return slowed_pool(monkeypatch, numba_backend, slow)


@pytest.mark.parametrize("slow, kept, f", [("split", 1, scaled_tanh_for_slow_splits),
                                           ("one", 2, scaled_tanh_for_slow_single_threads)])
def test_a_launch_keeps_the_way_its_first_calls_measured_faster(monkeypatch, slow, kept, f):
    asked = launches_with(monkeypatch, slow)
    x, b = np.random.default_rng(0).standard_normal((2, 32, 8))
    b = b[:, :1]                                      # one value per row: 32 rows to share out
    want = np.tanh(x) * b + x
    for _ in range(2 * TRIES + 4):
        got = mf.broadcast(f, x, b)
        np.testing.assert_allclose(got, want, rtol=1e-15)
    assert asked[:2 * TRIES] == [2, 1] * TRIES        # measured in turn, split first
    assert asked[2 * TRIES:] == [kept] * 4            # then the faster way only


def test_either_way_gives_the_same_bits(monkeypatch):
    x, b = np.random.default_rng(1).standard_normal((2, 32, 8)).astype(np.float32)
    b = b[:, :1]
    results = {}
    for slow, f in [("split", gate_for_slow_splits), ("one", gate_for_slow_single_threads)]:
        with monkeypatch.context() as m:
            asked = launches_with(m, slow)
            calls = [mf.gradient(lambda x: mf.sum(mf.broadcast(f, x, b)), x)[0] for _ in range(2 * TRIES + 2)]  # noqa: B023
            results[slow] = {n: calls[-1] for n in asked[-1:]}
            assert all(np.array_equal(c, calls[0]) for c in calls)   # split and one-thread calls alike
    assert list(results["split"]) == [1] and list(results["one"]) == [2]
    assert np.array_equal(results["split"][1], results["one"][2])


def gated_step_for_slow_splits(x, b):
    return mf.withgradient(lambda x: mf.sum(mf.broadcast(gate_for_slow_splits, x, b) * x), x)


def gated_step_for_slow_single_threads(x, b):
    return mf.withgradient(lambda x: mf.sum(mf.broadcast(gate_for_slow_single_threads, x, b) * x), x)


@pytest.mark.parametrize("slow, step", [("split", gated_step_for_slow_splits),
                                        ("one", gated_step_for_slow_single_threads)])
def test_a_compiled_step_gives_eagers_bits_for_72_calls_whichever_way_its_kernels_run(monkeypatch, slow, step):
    from tests.compiled.test_models_compiled import CALLS, bits
    from tests.compiled.test_native_replay import native_form

    from minflux.runtime import native_runner

    launches_with(monkeypatch, slow)
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", 5)
    native_runner.load_runner()   # here, rather than on the thread a replay starts
    monkeypatch.setattr("minflux.schedule.native_steps.threads_now", lambda: 2)
    monkeypatch.setattr("minflux.schedule.native.usable_cores", lambda: 2)
    rng = np.random.default_rng(2)
    compiled = mf.compile(step)
    for k in range(CALLS):
        x, b = rng.standard_normal((2, 32, 8)).astype(np.float32)
        b = b[:, :1]
        got, want = compiled(x, b), step(x, b)
        assert bits(got[0]) == bits(want[0]) and bits(got[1][0]) == bits(want[1][0]), f"call {k}"
    assert native_form(compiled) is not None



def cut_products_with(monkeypatch, slow: str) -> dict:
    """Products cut in two with two cores free, the way named ``slow`` (shares at once: ``"split"``, or
    in turn: ``"one"``) 20 ms slower; returns the threads each eager product and each native step of
    shares ran on, under ``"eager"`` and ``"native"``."""
    from minflux import matrix_product
    from minflux.schedule import native

    monkeypatch.setattr(matrix_product, "PARALLEL_MIN_MULTIPLY_ADDS", 1)
    monkeypatch.setattr(matrix_product, "get_num_threads", lambda: 2)
    monkeypatch.setattr("minflux.schedule.native_steps.threads_now", lambda: 2)
    monkeypatch.setattr(native, "usable_cores", lambda: 2)
    ran = {"eager": slowed_pool(monkeypatch, matrix_product, slow), "native": []}   # eager: the pool either way
    real_step = native.NativeForm._step

    def step(self, step, threads):
        ran["native"].append(threads)
        if (threads > 1) == (slow == "split"):
            time.sleep(0.02)
        return real_step(self, step, threads)

    monkeypatch.setattr(native.NativeForm, "_step", step)
    return ran


@pytest.mark.parametrize("slow, kept", [("split", 1), ("one", 2)])
def test_a_cut_products_shares_run_at_once_only_where_that_measured_faster(monkeypatch, slow, kept):
    from minflux import matrix_product
    from tests.compiled.test_models_compiled import bits

    ran = cut_products_with(monkeypatch, slow)["eager"]
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((8, 16)), rng.standard_normal((16, 130 + kept))   # a shape of its own: measured afresh
    first = bits(matrix_product.matmul(a, b))
    for _ in range(2 * TRIES + 3):
        assert bits(matrix_product.matmul(a, b)) == first   # at once or in turn, the same calls
    assert ran[:2 * TRIES] == [2, 1] * TRIES and ran[2 * TRIES:] == [kept] * 4


def test_a_product_cut_into_more_shares_measures_afresh(monkeypatch):
    from minflux import matrix_product

    ran = cut_products_with(monkeypatch, "split")["eager"]
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((8, 16)), rng.standard_normal((16, 3 * matrix_product._BLOCK))
    for _ in range(2 * TRIES + 2):   # two shares: in turn measured faster
        matrix_product.matmul(a, b)
    monkeypatch.setattr(matrix_product, "get_num_threads", lambda: 3)   # the same shape, now cut in three
    for _ in range(2 * TRIES + 2):
        matrix_product.matmul(a, b)
    assert ran == [2, 1] * TRIES + [1, 1] + [2, 1] * TRIES + [1, 1]


def test_a_choice_its_first_calls_made_while_the_other_core_was_busy_turns_at_a_recheck(monkeypatch):
    from minflux import matrix_product
    from minflux.runtime import split_choice
    from tests.compiled.test_models_compiled import bits

    monkeypatch.setattr(split_choice, "RECHECK_EVERY", 3)
    monkeypatch.setattr(matrix_product, "PARALLEL_MIN_MULTIPLY_ADDS", 1)
    monkeypatch.setattr(matrix_product, "get_num_threads", lambda: 2)
    monkeypatch.setattr(matrix_product, "threads_now", lambda: 2)
    busy, ran, real = [True], [], matrix_product.run_rows

    def run_rows(call, r0, r1, n_threads, args):   # one thread 10 ms; shares at once 20 ms while busy, then 5
        ran.append(n_threads)
        time.sleep(0.01 if n_threads == 1 else 0.02 if busy[0] else 0.005)
        real(call, r0, r1, n_threads, args)

    monkeypatch.setattr(matrix_product, "run_rows", run_rows)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((8, 16)), rng.standard_normal((16, 2 * matrix_product._BLOCK + 7))  # a shape of its own
    first = bits(matrix_product.matmul(a, b))
    for _ in range(2 * TRIES - 1):
        assert bits(matrix_product.matmul(a, b)) == first
    busy[0] = False
    for _ in range(7):
        assert bits(matrix_product.matmul(a, b)) == first   # at once or in turn, the same calls
    assert ran == [2, 1] * TRIES + [1, 1, 1] + [2] + [2, 2, 2]   # chosen in turn; the recheck at once turns it


@pytest.mark.parametrize("slow, kept", [("split", 1), ("one", 2)])
def test_a_native_steps_shares_run_at_once_only_where_that_measured_faster_with_eagers_bits(monkeypatch, slow, kept):
    from tests.compiled.test_models_compiled import CALLS

    ran = cut_products_with(monkeypatch, slow)["native"]
    replayed_with_two_products(monkeypatch, CALLS)
    measured = [2, 1] * TRIES    # each of the two products' steps, alternately at once and in turn
    assert ran[:4 * TRIES] == [n for n in measured for _ in range(2)]
    whole = [kept, 1] * TRIES    # then whole replays: each step as it chose, and every step in turn
    assert ran[4 * TRIES:8 * TRIES] == [n for n in whole for _ in range(2)]
    assert ran[8 * TRIES:] == [kept] * (len(ran) - 8 * TRIES)


def replayed_with_two_products(monkeypatch, calls: int):
    """``calls`` replays of two products cut in shares, each checked against the eager call's bits."""
    from minflux.runtime import native_runner
    from minflux.schedule.native_steps import LEARNING_REPLAYS
    from tests.compiled.test_models_compiled import bits
    from tests.compiled.test_native_product_shares import inputs, share_steps, two_products
    from tests.compiled.test_native_replay import native_form

    assert LEARNING_REPLAYS == 2 * TRIES
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", 5)
    native_runner.load_runner()   # here, rather than on the thread a replay starts
    rng = np.random.default_rng(4)
    step = mf.compile(two_products)
    for k in range(calls):
        args = inputs(rng, np.float32)
        assert [bits(a) for a in step(*args)] == [bits(a) for a in two_products(*args)], f"call {k}"
    assert share_steps(native_form(step)) == [2, 2]


def test_a_replay_whose_steps_at_once_slow_the_steps_after_them_runs_every_step_in_turn(monkeypatch):
    """Each step measures faster at once (in turn it takes 20 ms more), but a replay that ran one at
    once pays 60 ms after it, where no step's own timing sees it (as data left in the other core's
    cache cost the steps that read them): whole replays timed against each other find every step in
    turn faster, and keep it, with the eager bits."""
    from minflux.schedule.native_steps import NativeSteps

    ran = cut_products_with(monkeypatch, "one")["native"]
    real = NativeSteps.in_groups

    def in_groups(self, steps, choices):
        before = len(ran)
        real(self, steps, choices)
        if any(n > 1 for n in ran[before:]):
            time.sleep(0.06)

    monkeypatch.setattr(NativeSteps, "in_groups", in_groups)
    replayed_with_two_products(monkeypatch, 8 * TRIES + 5)
    assert ran[4 * TRIES:8 * TRIES] == [n for n in [2, 1] * TRIES for _ in range(2)]
    assert ran[8 * TRIES:] == [1] * (len(ran) - 8 * TRIES) and len(ran) > 8 * TRIES


@pytest.mark.parametrize("slow, kept", [("split", 1), ("one", 2)])
def test_a_nodes_gradient_sums_split_only_where_that_measured_faster(monkeypatch, slow, kept):
    from minflux.pointwise import node_kernel

    monkeypatch.setattr(node_kernel, "PARALLEL_MIN_ELEMENTS", 16)
    asked = slowed_pool(monkeypatch, node_kernel, slow)
    rng = np.random.default_rng(5)
    g, p, q = rng.standard_normal((3, 4 + kept, 1024))   # rows of 1024 elements; a shape of its own
    want = (g * p + g * q).tobytes()
    for _ in range(2 * TRIES + 4):
        (got,) = node_kernel.gradient_sums([g], [p, q], (((0, 0), (0, 1)),))
        assert got.tobytes() == want   # each term rounded, added in order: numpy's bits either way
    assert asked[:2 * TRIES] == [2, 1] * TRIES and asked[2 * TRIES:] == [kept] * 4
