"""The thread budget: MINFLUX_NUM_THREADS sizes the sleeping pool that large kernels and products share; BLAS stays at one thread."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import numba_backend
from minflux.runtime import settings, threads

CHILD = """
import json, threadpoolctl
import minflux as mf
print(json.dumps({"minflux": mf.get_num_threads(),
                  "blas": [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]}))
"""


def _child(env_threads: str) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["MINFLUX_NUM_THREADS"] = env_threads
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env,
                         check=True, cwd=os.getcwd())
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_blas_runs_on_one_thread_whatever_the_setting():
    pytest.importorskip("threadpoolctl")
    for setting in ("1", "2"):
        seen = _child(setting)
        assert seen["minflux"] == int(setting)
        assert seen["blas"] and all(n == 1 for n in seen["blas"])   # OpenBLAS alone would use every core


def test_set_num_threads_sizes_the_kernel_pool_and_leaves_blas_at_one(monkeypatch):
    pytest.importorskip("threadpoolctl")
    before = mf.get_num_threads()
    monkeypatch.setattr(numba_backend, "PARALLEL_MIN_ELEMENTS", 16)
    monkeypatch.setattr(numba_backend, "threads_now", lambda: 3)   # as if three cores were idle
    try:
        mf.set_num_threads(3)
        assert all(n == 1 for n in threads.blas_threads().values())
        x, b = np.random.default_rng(0).standard_normal((2, 40, 8))
        out = mf.broadcast(lambda x, b: x * x + b, x, b[:, :1])       # 40 rows to share out
        np.testing.assert_allclose(out, x * x + b[:, :1])
        names = [t.name for t in threading.enumerate() if t.name.startswith("minflux-kernel-")]
        assert len(names) >= 2        # two workers and the calling thread share the rows
        mf.set_num_threads(1)
        assert all(n == 1 for n in threads.blas_threads().values())
    finally:
        mf.set_num_threads(before)


IDLE = """
import sys, time
import numpy as np
import minflux as mf
mf.set_num_threads(2)
rng = np.random.default_rng(0)
a, b = rng.standard_normal((2, 512, 1024), dtype=np.float32)   # 2^28 multiply-adds: split
x = rng.standard_normal((512, 512))
for _ in range(20):                       # threaded products and kernels, then nothing to do
    mf.gradient(lambda a, b, x: mf.sum(mf.tanh(a @ b.T)) + mf.sum(mf.tanh(x) * x), a, b, x)
busy = time.process_time()
time.sleep(0.5)
print(time.process_time() - busy)
"""


def test_no_thread_spins_while_it_waits():
    env = {k: v for k, v in os.environ.items() if k != "MINFLUX_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", IDLE], capture_output=True, text=True, env=env,
                         check=True, cwd=os.getcwd())
    idle_cpu = float(out.stdout.strip().splitlines()[-1])
    assert idle_cpu < 0.05        # a spinning worker would burn about 0.5 s of CPU per thread


def test_bad_settings_name_the_fix(monkeypatch):
    monkeypatch.setattr(settings, "_values", {})      # as in a process that has read no setting yet
    monkeypatch.setattr(settings, "_set", {})
    for text in ("lots", "0", "-1", "2.5"):
        monkeypatch.setenv("MINFLUX_NUM_THREADS", text)
        with pytest.raises(ValueError, match=f"MINFLUX_NUM_THREADS='{text}' is not valid: it accepts a whole number"):
            mf.get_num_threads()
    with pytest.raises(ValueError, match=">= 1"):
        mf.set_num_threads(0)


@pytest.fixture
def machine(monkeypatch):
    """Report ``machine.running`` runnable threads on a machine of ``machine.cores`` cores."""
    state = type("Machine", (), {"running": 1, "cores": 4, "reads": 0})()

    def runnable():
        state.reads += 1
        return state.running

    monkeypatch.setattr(threads, "runnable_threads", runnable)
    monkeypatch.setattr(threads.os, "cpu_count", lambda: state.cores)
    monkeypatch.setattr(threads, "_sample", [float("-inf"), None])
    monkeypatch.setattr(threads, "SAMPLE_SECONDS", -1.0)     # read the machine on every call
    before = mf.get_num_threads()
    mf.set_num_threads(3)
    yield state
    mf.set_num_threads(before)


@pytest.mark.parametrize("running, expected", [(1, 3), (2, 3), (3, 2), (4, 1), (9, 1), (None, 3)])
def test_large_work_splits_only_over_idle_cores(machine, running, expected):
    machine.running = running          # the calling thread is one of the running ones
    assert threads.threads_now() == expected


def test_a_large_product_on_a_busy_machine_stays_on_the_calling_thread(machine, monkeypatch):
    from minflux import matrix_product

    calls = []
    real = matrix_product.run_rows
    monkeypatch.setattr(matrix_product, "run_rows", lambda *a: (calls.append(a[3]), real(*a)))
    a, b = np.ones((64, 4096), np.float32), np.ones((4096, 1024), np.float32)   # 2^28 multiply-adds
    machine.running = 3                                # two other threads on four cores: two free
    np.testing.assert_array_equal(matrix_product.matmul(a, b), np.full((64, 1024), 4096.0, np.float32))
    assert calls == [2]
    calls.clear()
    machine.running = 6
    np.testing.assert_array_equal(matrix_product.matmul(a, b), np.full((64, 1024), 4096.0, np.float32))
    assert calls == [1]              # the budget's three shares (the same bits), all on the calling thread


def test_the_machine_is_read_at_most_once_per_sample_period(machine, monkeypatch):
    monkeypatch.setattr(threads, "SAMPLE_SECONDS", 3600.0)
    for _ in range(5):
        threads.threads_now()
    assert machine.reads == 1
