"""Start a program on several local MPI ranks for a test, or skip when mpi4py or mpiexec is absent."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def mpiexec() -> str:
    """The ``mpiexec`` beside this Python (a virtual environment's, from the ``mpi`` extra) or on PATH;
    skips the calling test when there is none or mpi4py is not installed."""
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpi4py (pip install -e '.[mpi]')")
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if found is None:
        pytest.skip("needs mpiexec (pip install -e '.[mpi]' installs MPICH's)")
    return found


def launch(ranks: int, *args, env: dict | None = None, timeout: float = 120, **popen) -> subprocess.CompletedProcess:
    """Run ``python ARGS...`` on ``ranks`` local ranks and wait (``timeout`` seconds at most)."""
    return subprocess.run(command(ranks, *args), env=environment(env), capture_output=True, text=True,
                          timeout=timeout, **popen)


def command(ranks: int, *args) -> list[str]:
    return [mpiexec(), "-n", str(ranks), sys.executable, *map(str, args)]


def environment(extra: dict | None = None) -> dict:
    """The test's environment with one thread per rank (two ranks share the machine's cores)."""
    env = {**os.environ, "MINFLUX_NUM_THREADS": "1", **(extra or {})}
    return {k: v for k, v in env.items() if v is not None}
