"""minflux's thread budget: one number sizes the pool that large kernels and products share.

``MINFLUX_NUM_THREADS`` (read when minflux is imported; default: the cores this process may use), or
`set_num_threads` at run time, is how many threads a large kernel or matrix product may split over.
Whether one does is decided per call from its size: small work runs on the calling thread, where
handing it out would cost more than it saves. Large work splits over the budget's threads only as far
as the machine has idle cores (`threads_now`): on a machine busy with other work a second thread
would wait for a core and add its hand-over costs for nothing. The pool's workers sleep while they
wait (`minflux.compiler.row_pool`), so the budget costs no CPU between calls.

Every BLAS library loaded in the process runs on one thread (through `threadpoolctl` when it is
installed, or OpenBLAS's own ``openblas_set_num_threads`` otherwise): OpenBLAS's workers spin
between products, and on a busy machine two spinning pools made a training step cost many times the
CPU of one thread. minflux's products split themselves over its pool instead
(`minflux.matrix_product`). Code outside minflux that wants a threaded BLAS in the same process
can raise the limit with ``threadpoolctl.threadpool_limits``.

>>> import minflux as mf
>>> n = mf.get_num_threads()
>>> mf.set_num_threads(1); mf.get_num_threads()
1
>>> mf.set_num_threads(n)
"""
from __future__ import annotations

import ctypes
import logging
import os
import time

from .settings import positive_int_from_environment

__all__ = ["blas_threads", "get_num_threads", "set_num_threads", "threads_now", "usable_cores"]

log = logging.getLogger(__name__)

_setting: int | None = None


def usable_cores() -> int:
    """The number of cores this process may run on (its CPU affinity), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _from_environment() -> int:
    return positive_int_from_environment("MINFLUX_NUM_THREADS", usable_cores(),
                                         "the number of threads minflux may use")


def get_num_threads() -> int:
    """The threads one large kernel or matrix product may split over.

    >>> import minflux as mf
    >>> mf.get_num_threads() >= 1
    True
    """
    global _setting
    if _setting is None:
        set_num_threads(_from_environment())
    return _setting


def set_num_threads(n: int) -> None:
    """Let large kernels and matrix products split over ``n`` threads (BLAS itself stays at one).

    >>> import minflux as mf
    >>> before = mf.get_num_threads()
    >>> mf.set_num_threads(2); mf.get_num_threads()
    2
    >>> mf.set_num_threads(before)
    """
    global _setting
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads needs a whole number of threads >= 1, got {n!r}")
    _setting = n
    _limit_blas(1)


SAMPLE_SECONDS = 0.02
"""How long one reading of the machine's runnable threads is trusted (`threads_now`)."""

_sample = [float("-inf"), None]   # (when, threads runnable on the machine then, or None if unknown)


def runnable_threads() -> int | None:
    """How many threads the whole machine has running or ready to run now (the calling one
    included), from Linux's ``/proc/loadavg``; None where that is not available.

    >>> n = runnable_threads()
    >>> n is None or n >= 1
    True
    """
    try:
        with open("/proc/loadavg", "rb") as f:
            return int(f.read().split()[3].split(b"/")[0])
    except (OSError, IndexError, ValueError):
        return None


def threads_now() -> int:
    """The threads a large kernel or product may split over at this moment: the budget, cut to the
    cores that other work leaves free (the machine's cores less the other threads running or waiting
    to run, read at most every `SAMPLE_SECONDS`), and never less than one.

    >>> import minflux as mf
    >>> 1 <= threads_now() <= mf.get_num_threads()
    True
    """
    budget = get_num_threads()
    if budget == 1:
        return 1
    now = time.monotonic()
    if now - _sample[0] > SAMPLE_SECONDS:
        _sample[0], _sample[1] = now, runnable_threads()
    running = _sample[1]
    if running is None:
        return budget
    free = (os.cpu_count() or 1) - (running - 1)     # the calling thread is one of the running ones
    return max(1, min(budget, free))


def _limit_blas(n: int) -> None:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        _limit_openblas(n)
        return
    threadpool_limits(limits=n, user_api="blas")


def _limit_openblas(n: int) -> None:
    """Without threadpoolctl: numpy's bundled OpenBLAS through its C API."""
    for library in _openblas_libraries():
        for name in ("openblas_set_num_threads", "openblas_set_num_threads64_",
                     "scipy_openblas_set_num_threads", "scipy_openblas_set_num_threads64_"):
            setter = getattr(library, name, None)
            if setter is not None:
                setter(ctypes.c_int(n))
                break


def _openblas_libraries() -> list:
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return []
    found = []
    root = os.path.dirname(numpy.__file__)
    for folder in (os.path.join(root, os.pardir, "numpy.libs"), os.path.join(root, ".libs")):
        if os.path.isdir(folder):
            for name in sorted(os.listdir(folder)):
                if "openblas" in name and ".so" in name:
                    try:
                        found.append(ctypes.CDLL(os.path.join(folder, name)))
                    except OSError:
                        log.debug("could not open %s to limit its threads", name)
    return found


def blas_threads() -> dict:
    """The thread limit of each BLAS library loaded in this process (from `threadpoolctl`): one.

    >>> import minflux as mf
    >>> all(n == 1 for n in blas_threads().values())
    True
    """
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return {}
    return {info["filepath"]: info["num_threads"] for info in threadpool_info()
            if info.get("user_api") == "blas"}
