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
from minflux.compiler import numba_backend, threads

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
a, b = rng.standard_normal((2, 256, 1024), dtype=np.float32)
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
    monkeypatch.setenv("MINFLUX_NUM_THREADS", "lots")
    with pytest.raises(ValueError, match="MINFLUX_NUM_THREADS"):
        threads._from_environment()
    with pytest.raises(ValueError, match=">= 1"):
        mf.set_num_threads(0)
