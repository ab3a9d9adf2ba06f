"""Shared benchmark plumbing: the machine's description, median timing and result files."""
from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path

from minflux.files import write_atomically

RESULTS = Path(__file__).resolve().parent / "results"
_GENERATED = None


def source_module(name: str, source: str):
    """Import generated Python ``source`` as module ``name`` from a file (the compiler and numba
    read a function's source, so generated benchmark code lives in a real file)."""
    import importlib.util
    import sys
    import tempfile

    global _GENERATED
    if _GENERATED is None:
        _GENERATED = Path(tempfile.mkdtemp(prefix="minflux-bench-"))
    path = _GENERATED / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def machine() -> str:
    """A one-line description of this machine: CPU model (and LLVM's name for its core, which tells
    apart the generations a virtual machine names alike), core count, the versions of Python, numpy
    (with its BLAS and the kernels that BLAS runs), numba and MKL."""
    import numpy as np

    from minflux.runtime.gemm_choice import blas_kernels
    from minflux.runtime.kernel_cache import host_tag

    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{model} ({host_tag().split()[0]}), {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__} "
            f"({_blas(np)}; {blas_kernels() or 'no OpenBLAS kernels'}), {_version('numba')}, {_version('mkl')}")


def _blas(np) -> str:
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    return f"{blas.get('name', 'unknown BLAS')} {blas.get('version', '')}".strip()


def _version(package: str) -> str:
    import importlib.metadata

    try:
        return f"{package} {importlib.metadata.version(package)}"
    except importlib.metadata.PackageNotFoundError:
        return f"no {package}"


def median_time(fn, repeats: int = 5, warmup: int = 1) -> float:
    """Median wall-clock seconds of ``fn()`` over ``repeats`` runs after ``warmup`` runs."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def traced_peak_mib(fn, *args) -> float:
    """Peak MiB traced (numpy allocations) during one call ``fn(*args)``, above what was live before it."""
    import tracemalloc

    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return (peak - base) / 2**20


def library_versions(names=("torch", "jax")) -> str:
    """``"name version"`` for each library, or ``"name not installed"``, comma-separated."""
    import importlib

    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.import_module(name).__version__}")
        except ImportError:
            found.append(f"{name} not installed")
    return ", ".join(found)


def write_results(name: str, data: dict, table: str) -> None:
    """Write ``results/NAME.json`` and ``results/NAME.md`` (the table the README is regenerated from)."""
    data = dict(data, machine=machine())
    write_atomically(RESULTS / f"{name}.json", json.dumps(data, indent=2) + "\n")
    write_atomically(RESULTS / f"{name}.md", results_markdown(table, data["machine"]))
    print(table)


def results_markdown(table: str, machine_line: str) -> str:
    """A results block: the table and the machine it was measured on.

    >>> results_markdown("| a |\\n", "some CPU")
    '| a |\\n\\nMeasured on: some CPU.\\n'
    """
    return table.rstrip("\n") + f"\n\nMeasured on: {machine_line}.\n"


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A Markdown table from a header and rows of cells."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def reuse_freed_memory():
    """Keep freed blocks in the heap (no mmap/trim), so big arrays are not faulted in again."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD: the maximum glibc accepts
    libc.mallopt(-1, 1 << 30)    # M_TRIM_THRESHOLD
