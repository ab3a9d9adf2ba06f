"""Freed arrays stay with the C allocator for the next step instead of going back to the system.

A training step allocates and frees the same sizes of arrays on every call. With its default
settings glibc serves arrays from 128 KiB (up to about 32 MiB once it has adapted) with fresh pages
from the system and gives freed memory at the top of its heap back at once, so every step faults
all its activations in again: about 6,000 page faults per step of the default experiment's model,
5-10% of its CPU time. minflux therefore asks glibc, once at its first gradient, product or
recording, to serve arrays below `MMAP_THRESHOLD_BYTES` from its heap and to keep up to
`TRIM_THRESHOLD_BYTES` of freed memory there; the process's memory then stays at its peak between
steps rather than returning to the system.
``MINFLUX_KEEP_FREED_MEMORY=0`` leaves glibc's defaults; elsewhere (macOS, musl) nothing changes.

>>> import minflux as mf
>>> keep_freed_memory() in (True, False)
True
"""
from __future__ import annotations

import ctypes
import functools
import logging

from . import settings
from .threads import get_num_threads

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "keep_freed_memory", "prepare_process",
           "release_freed_memory"]

log = logging.getLogger(__name__)

MMAP_THRESHOLD_BYTES = 32 * 2**20
"""Allocations below this come from glibc's heap, where freed blocks are reused (glibc's own cap)."""
TRIM_THRESHOLD_BYTES = 512 * 2**20
"""Freed memory at the top of the heap that glibc keeps for reuse before giving any back."""

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3   # glibc's mallopt parameters (malloc.h)


@functools.cache
def keep_freed_memory() -> bool:
    """Apply the settings above once (see the module docstring); True where glibc took them."""
    if not settings.get("keep_freed_memory"):
        return False
    libc = _glibc()
    if libc is None:
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def prepare_process() -> None:
    """What minflux sets in its process, applied at its first gradient, matrix product, recording or
    kernel (importing it changes nothing): the thread budget, BLAS on one thread
    (`minflux.runtime.threads`) and glibc's keeping of freed memory (above).

    >>> prepare_process()
    """
    get_num_threads()
    keep_freed_memory()


def release_freed_memory() -> bool:
    """Give the free memory of glibc's heap back to the system now; True where glibc did.

    For a moment after which the freed memory will not be asked for again soon: once a compiled
    step's replay has its own buffers (`minflux.schedule.buffers`), the memory its earlier calls
    freed would otherwise stay in the process beside them.

    >>> release_freed_memory() in (True, False)
    True
    """
    libc = _glibc()
    return bool(libc.malloc_trim(0)) if libc is not None and keep_freed_memory() else False


@functools.cache
def _glibc():
    """The process's C library when it is glibc (with ``mallopt`` and ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        log.debug("no C library to configure")
        return None
    glibc = all(hasattr(libc, name) for name in ("gnu_get_libc_version", "mallopt", "malloc_trim"))
    return libc if glibc else None
