"""Freed arrays stay with glibc for the next step: a loop that frees and reallocates the same arrays
stops faulting pages in after its first round (and faults them in every round with the switch off)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from minflux.runtime.allocator import keep_freed_memory

CHILD = """
import resource
import numpy as np
import minflux as mf

mf.gradient(lambda x: mf.sum(x), np.ones(2))   # minflux's first use sets the allocator up

def step():
    arrays = [np.ones((256, 1024)) for _ in range(8)]   # 2 MiB each: glibc would map them afresh
    return sum(float(a[0, 0]) for a in arrays)

step(); step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10)
"""


def _faults_per_step(setting: str) -> float:
    env = dict(os.environ, MINFLUX_KEEP_FREED_MEMORY=setting)
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, check=True)
    return float(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not keep_freed_memory(), reason="needs glibc")
def test_a_step_reuses_the_memory_the_last_step_freed():
    pages = 8 * 2 * 2**20 / os.sysconf("SC_PAGE_SIZE")
    assert _faults_per_step("1") < 0.05 * pages
    assert _faults_per_step("0") > 0.5 * pages      # glibc's defaults: every page faulted in again
