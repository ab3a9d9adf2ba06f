"""Importing minflux changes nothing in the host process: BLAS keeps its threads and glibc its
settings until minflux first computes, and BLAS variables the user set are respected after."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("threadpoolctl")

PROBE = """
import json, numpy as np
from threadpoolctl import threadpool_info
def blas():
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}
before = blas()
import minflux as mf
after_import = blas()
%s
print(json.dumps([before, after_import, blas()]))
"""
USES = {
    "a gradient": "mf.gradient(lambda x: mf.sum(mf.tanh(x @ x)), np.ones((4, 4)))",
    # a model evaluated outside gradient, as train.evaluate does: its products are numpy's own
    "a kernel outside gradient": "mf.nn.LayerNorm(4)(np.ones((4, 4), np.float32) @ np.ones((4, 4), np.float32))",
}


def blas_threads_in_a_child(use: str = USES["a gradient"], **env) -> list:
    variables = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", PROBE % use], env={**variables, **env}, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: BLAS has one thread anyway")
@pytest.mark.parametrize("use", USES)
def test_blas_threads_change_only_once_minflux_computes(use):
    before, after_import, after_use = blas_threads_in_a_child(USES[use])
    assert before == after_import and max(before.values()) > 1
    assert set(after_use.values()) == {1}


def test_blas_threads_the_user_chose_are_kept():
    before, after_import, after_use = blas_threads_in_a_child(OPENBLAS_NUM_THREADS="2", OMP_NUM_THREADS="2")
    assert before == after_import == {k: after_use[k] for k in before} and set(before.values()) == {2}


def test_import_does_not_touch_the_allocator_or_load_mkl():
    probe = ("import sys, minflux; "
             "print(minflux.runtime.allocator.keep_freed_memory.cache_info().currsize, "
             "'gemm' in vars(sys.modules['minflux.runtime.gemm_provider']))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["0", "False"]
