"""Which library multiplies a product of a given shape on this machine: measured, not assumed.

MKL's GEMM is faster than numpy's OpenBLAS on some CPUs and slower on others (1.3-1.7x faster on an
Intel Xeon, 1.4x slower on an AMD EPYC at the same recurrent-model shapes), and below a size its
call costs more than the arithmetic. So with ``MINFLUX_GEMM=auto`` (the default) and MKL installed,
the first product that could go to MKL runs a short calibration (well under a second): both
libraries on one thread at `CALIBRATION_SHAPES` -- the shipped models' forward, input-gradient and
weight-gradient products and two small ones -- and a product then goes to the library that was
faster at the calibration shape nearest its own (in log-size of each dimension). The table is
cached beside the kernel cache, one file per CPU, library versions and the kernels the libraries run
(`blas_kernels`: OpenBLAS picks its kernels for the CPU when it loads, and ``OPENBLAS_CORETYPE`` can
force older ones that run at half the speed on the same CPU), trusted only when only its
owner can write it and written whole or not at all, so every process on the machine (a run and its
resume, an eager step and its replay) decides alike. ``MINFLUX_GEMM=mkl`` or ``numpy`` pins one
library; ``python -m minflux.runtime.gemm_report`` prints the table and what it chose.

>>> import numpy as np
>>> rows = [{"shape": [32, 384, 512, False, False], "seconds": {"numpy": 1.0, "mkl": 2.0}},
...         {"shape": [16, 16, 16, False, False], "seconds": {"numpy": 2.0, "mkl": 1.0}},
...         {"shape": [32, 512, 384, False, True], "seconds": {"numpy": 2.0, "mkl": 1.0}}]
>>> nearest(np.float32, 30, 400, 500, rows), nearest(np.float32, 20, 20, 20, rows)
('numpy', 'mkl')
>>> nearest(np.float32, 30, 400, 500, rows, b_transposed=True)
'mkl'
"""
from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import gemm_provider
from .._version import __version__
from .cache_directory import cache_dir, untrusted_reason, warn_once

__all__ = ["CALIBRATION_SHAPES", "CALIBRATION_VERSION", "KERNEL_SETTINGS", "blas_kernels", "calibrate",
           "machine", "nearest", "prefers_gemm", "table"]

CALIBRATION_SHAPES = (  # (m, k, n, a transposed, b transposed)
    (16, 16, 16, False, False), (32, 128, 128, False, False),
    (32, 384, 512, False, False), (32, 512, 384, False, True), (384, 1600, 512, True, False),
    (64, 1536, 2048, False, False), (64, 2048, 1536, False, True), (512, 1600, 1536, True, False),
)
"""The HM-LSTM's products at the small and PTB sizes (forward ``B x K @ K x 4H``, input gradient
``B x 4H @ (K x 4H).T``, weight gradient ``(T B x K).T @ T B x 4H``, the PTB one over fewer rows) and
two small products, where a library's call overhead decides."""

CALIBRATION_VERSION = 2
"""Raised when the way a calibration measures changes, so that tables measured the old way are measured
again. Version 2: BLAS runs on one thread during a calibration whoever asks for it first (under
version 1, a report run before minflux's first product timed numpy's threaded OpenBLAS)."""

KERNEL_SETTINGS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR",
                   "MKL_DEBUG_CPU_TYPE")
"""The environment variables that change which kernels OpenBLAS and MKL run, or how they block them."""

_REPEATS = 3
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_decisions: dict = {}
_tables: dict = {}


def prefers_gemm(m: int, k: int, n: int, dtype, a_transposed: bool = False, b_transposed: bool = False) -> bool:
    """True when the loaded GEMM (`minflux.runtime.gemm_provider`) should multiply an ``m x k @ k x n``
    product of ``dtype`` here (always, when ``MINFLUX_GEMM`` names it; never without one);
    ``a_transposed`` and ``b_transposed`` say an operand is laid out column-major.

    >>> import numpy as np
    >>> prefers_gemm(4, 4, 4, np.dtype(np.int64))        # only float products go to a GEMM library
    False
    """
    key = (m, k, n, dtype, a_transposed, b_transposed)
    found = _decisions.get(key)
    if found is None:
        if gemm_provider.gemm is None or dtype not in _FLOATS:
            found = False
        elif gemm_provider.choice != "auto":
            found = True
        else:
            found = nearest(dtype, m, k, n, table(dtype), a_transposed, b_transposed) == gemm_provider.provider
        _decisions[key] = found
    return found


def nearest(dtype, m: int, k: int, n: int, rows: list, a_transposed: bool = False,
            b_transposed: bool = False) -> str:
    """The faster library at the row of ``rows`` nearest an ``m x k @ k x n`` product: of the same
    operand layouts where there is one, then nearest in log-size; numpy unless the other is at
    least 3% faster."""
    layout = [a_transposed, b_transposed]

    def distance(row):
        size = sum(abs(math.log2(max(a, 1) / b)) for a, b in zip((m, k, n), row["shape"][:3]))
        return (list(row["shape"][3:5]) != layout, size)

    seconds = min(rows, key=distance)["seconds"]
    best = min(seconds, key=seconds.get)
    return best if seconds[best] < 0.97 * seconds.get("numpy", math.inf) else "numpy"


def table(dtype) -> list:
    """The calibration rows for ``dtype`` (float32 or float64): read from the cache, else measured now.

    >>> import numpy as np
    >>> from minflux.runtime import gemm_provider
    >>> gemm_provider.gemm is None or len(table(np.float32)) == len(CALIBRATION_SHAPES)
    True
    """
    dtype = np.dtype(dtype)
    rows = _tables.get(dtype.name)
    if rows is None:
        path = cache_file(dtype)
        rows = _read(path)
        if rows is None:
            absent = not path.exists()
            rows = write(path, calibrate(dtype), first=absent)
        _tables[dtype.name] = rows
    return rows


def calibrate(dtype) -> list:
    """Time numpy and the loaded GEMM at every calibration shape, one thread each (minflux's pool
    splits large products; each share is one such call); seconds are the best of a few repeats.

    >>> import numpy as np
    >>> from minflux.runtime import gemm_provider
    >>> gemm_provider.gemm is None or set(calibrate(np.float32)[0]["seconds"]) == {"numpy", gemm_provider.provider}
    True
    """
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):   # as minflux runs BLAS, whoever asks first
        return [_calibrated_row(dtype, shape) for shape in CALIBRATION_SHAPES]


def _calibrated_row(dtype, shape) -> dict:
    m, k, n, ta, tb = shape
    rng = np.random.default_rng(0)
    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
    a, b = (a.T if ta else a), (b.T if tb else b)
    out = np.empty((m, n), dtype)
    seconds = {"numpy": _best(lambda: np.matmul(a, b, out=out))}
    if gemm_provider.gemm is not None and gemm_provider.gemm(a, b, out):
        seconds[gemm_provider.provider] = _best(lambda: gemm_provider.gemm(a, b, out))
    return {"shape": [m, k, n, ta, tb], "seconds": seconds}


def _best(call) -> float:
    call()
    best = math.inf
    for _ in range(_REPEATS):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def machine() -> dict:
    """What a calibration depends on: the CPU, the libraries' versions and the kernels they run.

    >>> sorted(machine())[:4]
    ['blas kernels', 'calibration', 'cpu', 'host']
    """
    from .kernel_cache import host_tag

    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    try:
        mkl = importlib.metadata.version("mkl")
    except importlib.metadata.PackageNotFoundError:
        mkl = None
    return {"blas kernels": blas_kernels(), "calibration": CALIBRATION_VERSION, "cpu": _cpu_model(), "host": host_tag(),
            "minflux": __version__, "numpy": np.__version__,
            "numpy blas": f"{blas.get('name')} {blas.get('version')}", "mkl": mkl,
            "python": ".".join(map(str, sys.version_info[:2]))}


@functools.cache
def blas_kernels() -> str:
    """The kernels this process's OpenBLAS runs (its name for them), and the `KERNEL_SETTINGS` set in
    the environment: fixed when the library loads, so asked once.

    >>> kernels = blas_kernels()
    >>> isinstance(kernels, str) and (kernels == "" or "=" in kernels or "openblas" in kernels)
    True
    """
    from threadpoolctl import threadpool_info

    found = sorted({f"{info.get('prefix', 'openblas')} {info.get('architecture', '?')}"
                    for info in threadpool_info() if info.get("internal_api") == "openblas"})
    found += [f"{name}={os.environ[name]}" for name in KERNEL_SETTINGS if name in os.environ]
    return ", ".join(found)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def cache_file(dtype) -> Path:
    """Where the calibration of ``dtype`` on this machine is kept.

    >>> import numpy as np
    >>> cache_file(np.float32).parent.name
    'gemm'
    """
    dtype = np.dtype(dtype)
    facts = json.dumps(machine(), sort_keys=True)
    return cache_dir() / "gemm" / f"{dtype.name}-{hashlib.sha256(facts.encode()).hexdigest()[:16]}.json"


def _read(path: Path) -> list | None:
    try:
        reason = untrusted_reason(path.parent) or untrusted_reason(path)
    except OSError:
        return None
    if reason is not None:
        warn_once(f"not reading the product calibration {path}: {reason}; measuring again")
        return None
    try:
        record = json.loads(path.read_text())
        rows = record["rows"]
        if record.get("machine") == machine() and all(set(r) == {"shape", "seconds"} for r in rows):
            return rows
    except (OSError, ValueError, KeyError, TypeError):
        pass
    warn_once(f"the product calibration {path} is damaged or from another machine; measuring again")
    return None


def write(path: Path, rows: list, first: bool = False) -> list:
    """Write the table whole or not at all (a temporary file renamed over it); the rows the file holds
    then. With ``first`` (no table was there when this process began measuring), a table another
    process wrote meanwhile stays, and its rows are returned instead: processes that calibrate at
    once then multiply alike, where on a CPU on which the libraries nearly tie their own measurements
    could choose differently.

    >>> import json, pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "gemm" / "t.json"
    >>> write(path, []), json.loads(path.read_text())["rows"]
    ([], [])
    >>> write(path, [{"shape": [1, 1, 1, False, False], "seconds": {"numpy": 1.0}}], first=True)
    []
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if untrusted_reason(path.parent) is not None:
            return rows
        fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump({"machine": machine(), "rows": rows}, f, indent=1)
        if first:
            try:
                os.link(temporary, path)   # only where no table is there yet
            except FileExistsError:
                found = _read(path)
                if found is not None:
                    os.unlink(temporary)
                    return found
            except OSError:
                pass   # a file system without hard links: renamed over it
            else:
                os.unlink(temporary)
                return rows
        os.replace(temporary, path)
    except OSError as e:
        warn_once(f"could not save the product calibration in {path.parent} ({e}); it is measured "
                  "again in the next process")
    return rows
