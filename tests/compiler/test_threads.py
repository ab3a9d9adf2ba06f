"""The thread budget: MINFLUX_NUM_THREADS sizes the kernel pool and caps BLAS, so they never oversubscribe."""
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


def test_the_setting_caps_blas_in_a_new_process():
    pytest.importorskip("threadpoolctl")
    seen = _child("1")
    assert seen["minflux"] == 1
    assert seen["blas"] and all(n == 1 for n in seen["blas"])   # numpy's OpenBLAS would use every core


def test_set_num_threads_caps_blas_and_sizes_the_kernel_pool(monkeypatch):
    pytest.importorskip("threadpoolctl")
    before = mf.get_num_threads()
    monkeypatch.setattr(numba_backend, "PARALLEL_MIN_ELEMENTS", 16)
    try:
        mf.set_num_threads(3)
        assert all(n == 3 for n in threads.blas_threads().values())
        x, b = np.random.default_rng(0).standard_normal((2, 40, 8))
        out = mf.broadcast(lambda x, b: x * x + b, x, b[:, :1])       # 40 rows to share out
        np.testing.assert_allclose(out, x * x + b[:, :1])
        names = [t.name for t in threading.enumerate() if t.name.startswith("minflux-kernel-")]
        assert len(names) >= 2        # two workers and the calling thread share the rows
        mf.set_num_threads(1)
        assert all(n == 1 for n in threads.blas_threads().values())
    finally:
        mf.set_num_threads(before)


def test_bad_settings_name_the_fix(monkeypatch):
    monkeypatch.setenv("MINFLUX_NUM_THREADS", "lots")
    with pytest.raises(ValueError, match="MINFLUX_NUM_THREADS"):
        threads._from_environment()
    with pytest.raises(ValueError, match=">= 1"):
        mf.set_num_threads(0)
