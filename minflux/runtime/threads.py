"""minflux's thread budget: one number sizes the pool that large kernels and products share.

``MINFLUX_NUM_THREADS`` (`minflux.runtime.settings`; default: the cores this process may use), or
`set_num_threads` at run time, is how many threads a large kernel or matrix product may split over.
Whether one does is decided per call from its size: small work runs on the calling thread, where
handing it out would cost more than it saves. Large work splits over the budget's threads only as far
as the machine has idle cores (`threads_now`): on a machine busy with other work a second thread
would wait for a core and add its hand-over costs for nothing. The pool's workers sleep while they
wait (`minflux.runtime.row_pool`), so the budget costs no CPU between calls.

Once minflux first computes (a product, a gradient, a compiled step; importing it changes nothing),
every BLAS library loaded in the process runs on one thread (through `threadpoolctl`), unless the
user chose BLAS's threads in ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` or
``BLIS_NUM_THREADS``: OpenBLAS's workers spin between products, and on a busy machine two spinning
pools made a training step cost many times the CPU of one thread. minflux's products split
themselves over its pool instead (`minflux.matrix_product`). Code outside minflux that wants a
threaded BLAS in the same process can raise the limit with ``threadpoolctl.threadpool_limits``.

>>> import minflux as mf
>>> n = mf.get_num_threads()
>>> mf.set_num_threads(1); mf.get_num_threads()
1
>>> mf.set_num_threads(n)
"""
from __future__ import annotations

import os
import time

from . import settings

__all__ = ["PARALLEL_MIN_ELEMENTS", "blas_threads", "get_num_threads", "set_num_threads", "threads_now",
           "usable_cores"]

PARALLEL_MIN_ELEMENTS = 1 << 17
"""Elements below which a kernel runs on the calling thread: a second thread costs more CPU than it
saves time (measured). Above it, each kernel's launcher (and a node's gradient sums) measures
whether splitting pays on this machine (`minflux.runtime.split_choice`)."""

_blas_limited = False


def usable_cores() -> int:
    """The number of cores this process may run on (its CPU affinity), at least 1."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def get_num_threads() -> int:
    """The threads one large kernel or matrix product may split over.

    >>> import minflux as mf
    >>> mf.get_num_threads() >= 1
    True
    """
    if not _blas_limited:
        _limit_blas_once()
    return settings.get("num_threads")


def set_num_threads(n: int) -> None:
    """Let large kernels and matrix products split over ``n`` threads (BLAS itself stays at one).

    >>> import minflux as mf
    >>> before = mf.get_num_threads()
    >>> mf.set_num_threads(2); mf.get_num_threads()
    2
    >>> mf.set_num_threads(before)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"set_num_threads needs a whole number of threads >= 1, got {n!r}")
    settings.set("num_threads", n)
    _limit_blas_once()


def _limit_blas_once() -> None:
    global _blas_limited
    _blas_limited = True
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


BLAS_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")
"""Where a user who set one of these chose BLAS's threads, minflux leaves them as they are."""


def _limit_blas(n: int) -> None:
    if any(os.environ.get(name, "").strip() for name in BLAS_VARIABLES):
        return
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")


def blas_threads() -> dict:
    """The thread limit of each BLAS library loaded in this process (from `threadpoolctl`): one.

    >>> import minflux as mf
    >>> _ = mf.get_num_threads()          # minflux's first use limits BLAS
    >>> all(n == 1 for n in blas_threads().values()) or any(os.environ.get(v) for v in BLAS_VARIABLES)
    True
    """
    from threadpoolctl import threadpool_info

    return {info["filepath"]: info["num_threads"] for info in threadpool_info()
            if info.get("user_api") == "blas"}
