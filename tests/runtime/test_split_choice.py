"""A large kernel launch splits over threads only where its own first calls measured splitting faster,
and gives the same bits either way."""
from __future__ import annotations

import time

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import numba_backend
from minflux.runtime.split_choice import TRIES


# each test launches functions of its own: a launcher keeps its choice for good
def scaled_tanh_for_slow_splits(x, b):
    return mf.tanh(x) * b + x


def scaled_tanh_for_slow_single_threads(x, b):
    return mf.tanh(x) * b + x


def gate_for_slow_splits(x, b):
    return mf.sigmoid(x) * b if x > 0 else mf.tanh(x)


def gate_for_slow_single_threads(x, b):
    return mf.sigmoid(x) * b if x > 0 else mf.tanh(x)


def launches_with(monkeypatch, slow: str):
    """Every kernel launch of 32 rows split over two threads when asked, the way named ``slow``
    (``"split"`` or ``"one"``) taking 20 ms longer; returns the thread counts launches asked for."""
    monkeypatch.setattr(numba_backend, "PARALLEL_MIN_ELEMENTS", 16)
    monkeypatch.setattr(numba_backend, "threads_now", lambda: 2)
    asked = []
    real = numba_backend.run_rows

    def run_rows(call, r0, r1, n_threads, args):
        asked.append(n_threads)
        if (n_threads > 1) == (slow == "split"):
            time.sleep(0.02)
        real(call, r0, r1, n_threads, args)

    monkeypatch.setattr(numba_backend, "run_rows", run_rows)
    return asked


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
    monkeypatch.setattr("minflux.schedule.native.threads_now", lambda: 2)
    monkeypatch.setattr("minflux.schedule.native.usable_cores", lambda: 2)
    rng = np.random.default_rng(2)
    compiled = mf.compile(step)
    for k in range(CALLS):
        x, b = rng.standard_normal((2, 32, 8)).astype(np.float32)
        b = b[:, :1]
        got, want = compiled(x, b), step(x, b)
        assert bits(got[0]) == bits(want[0]) and bits(got[1][0]) == bits(want[1][0]), f"call {k}"
    assert native_form(compiled) is not None
