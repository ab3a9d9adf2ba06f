"""Each framework in its own process, in one of two thread settings.

Thread pools and allocators of two frameworks in one process disturb each other, so a comparison
runs every measurement in a fresh process of its own, in one of two settings:

* ``one``: the process is pinned to one core (CPU affinity, set before the interpreter starts) and
  every pool is told so: ``MINFLUX_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``,
  ``MKL_NUM_THREADS`` at 1, ``PJRT_NPROC=1`` for XLA (which ignores the TensorFlow-style
  ``intra_op_parallelism_threads``), ``torch.set_num_threads(1)`` in the worker. The worker records
  its CPU time over wall time; above `MAX_ONE_CORE_RATIO` the run used more than one core and is
  reported as invalid.
* ``all``: every framework at its defaults on all the machine's cores (PyTorch told the core count).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

SETTINGS = ("one", "all")
MAX_ONE_CORE_RATIO = 1.05
_THREAD_VARIABLES = ("MINFLUX_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                     "MKL_NUM_THREADS", "PJRT_NPROC", "XLA_FLAGS")


def environment(setting: str) -> dict:
    """The environment of a worker process in ``setting`` (thread variables of the caller removed)."""
    env = {k: v for k, v in os.environ.items() if k not in _THREAD_VARIABLES}
    if setting == "one":
        env.update({name: "1" for name in _THREAD_VARIABLES[:5]}, PJRT_NPROC="1",
                   XLA_FLAGS="--xla_cpu_multi_thread_eigen=false")
    elif setting != "all":
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    return env


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_worker(script: str, args: list, setting: str, timeout: float = 1800, env: dict | None = None) -> dict:
    """Run ``python script --worker args...`` in ``setting`` (``env`` added to its environment); the
    JSON object its last line prints."""
    core = sorted(os.sched_getaffinity(0))[-1] if hasattr(os, "sched_getaffinity") else None

    def pin():
        if setting == "one" and core is not None:
            os.sched_setaffinity(0, {core})

    done = subprocess.run([sys.executable, script, "--worker", setting, *map(str, args)],
                          env={**environment(setting), **(env or {})}, preexec_fn=pin, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"worker {args} ({setting}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def configure_torch(setting: str) -> None:
    """In a PyTorch worker, before timing: tell PyTorch its thread count."""
    import torch

    torch.set_num_threads(1 if setting == "one" else cores())


def timed(fn, steps: int) -> list:
    """``[wall_s, cpu_s]`` of each of ``steps`` calls of ``fn`` (CPU time of every thread of the process)."""
    import time

    out = []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        out.append([time.perf_counter() - wall, time.process_time() - cpu])
    return out


def cpu_per_wall(samples: list) -> float:
    """Total CPU time over total wall time of ``[wall_s, cpu_s]`` samples."""
    return sum(c for _, c in samples) / sum(w for w, _ in samples)
