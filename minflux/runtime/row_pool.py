"""minflux's worker threads: a call over rows ``0:n`` shared out, with every waiting thread asleep.

Kernels and large matrix products split their rows over one pool of persistent workers. A worker
waits on a lock, which puts it to sleep in the kernel: it costs no CPU between calls, on an idle or
a busy machine (a pool that spins while it waits takes a whole core from whatever else runs). The
calling thread runs the first share itself; ctypes calls and numpy's BLAS release the GIL, so the
shares run at once.

>>> from minflux.runtime.row_pool import run_rows
>>> seen = []
>>> run_rows(lambda r0, r1: seen.append((r0, r1)), 0, 4, 2, ())
>>> sorted(seen)
[(0, 2), (2, 4)]
"""
from __future__ import annotations

import os
import threading

__all__ = ["RowPool", "run_rows"]


class RowPool:
    """Persistent worker threads that each run one share of a call's rows.

    Each worker sleeps on its own lock; `run` hands every worker its share by releasing that lock,
    runs the first share on the calling thread and waits on each worker's completion lock; what a
    share raised is raised there once every share is done (the first share's first). A second
    Python thread that calls in while the pool is busy runs its whole call itself instead of waiting.

    >>> pool = RowPool()
    >>> pool.grow(1)
    >>> out = [0] * 4
    >>> def fill(r0, r1):
    ...     out[r0:r1] = [1] * (r1 - r0)
    >>> pool.run(fill, 4, 2, ())
    >>> out
    [1, 1, 1, 1]
    """

    def __init__(self):
        self.busy = threading.Lock()
        self.workers: list = []
        self._growing = threading.Lock()

    def grow(self, n_workers: int) -> None:
        """Start workers until there are ``n_workers``."""
        with self._growing:
            for w in range(len(self.workers), n_workers):
                start, done = threading.Lock(), threading.Lock()
                start.acquire()
                done.acquire()
                task: list = [None, None]   # the call and its arguments; what it raised
                thread = threading.Thread(target=self._serve, args=(start, done, task), daemon=True,
                                          name=f"minflux-kernel-{w}")
                thread.start()
                self.workers.append((start, done, task))

    @staticmethod
    def _serve(start, done, task):
        while True:
            start.acquire()
            call, args = task[0]
            task[0] = None
            try:
                call(*args)
            except BaseException as e:   # raised by the caller once every share is done; the worker lives on
                task[1] = e
            finally:
                done.release()

    def run(self, call, rows: int, n_shares: int, args: tuple) -> None:
        """``call(r0, r1, *args)`` over rows ``0:rows`` in ``n_shares`` contiguous shares."""
        if not self.busy.acquire(blocking=False):
            call(0, rows, *args)
            return
        try:
            bounds = [rows * t // n_shares for t in range(n_shares + 1)]
            handed = []
            for (start, done, task), a, b in zip(self.workers, bounds[1:-1], bounds[2:]):
                task[0], task[1] = (call, (a, b) + args), None
                start.release()
                handed.append((done, task))
            try:
                call(0, bounds[1], *args)
            finally:
                _wait_all([done for done, _ in handed])
            raised = [task[1] for _, task in handed if task[1] is not None]
            for _, task in handed:
                task[1] = None   # nor kept with the arrays its frames hold
            if raised:
                raise raised[0]
        finally:
            self.busy.release()


def _wait_all(done_locks: list) -> None:
    """Wait until every worker has finished its share, even through a Ctrl-C (raised afterwards), so
    that no worker is still writing into arrays the caller is about to drop or reuse."""
    interrupted = None
    for done in done_locks:
        while True:
            try:
                done.acquire()
                break
            except KeyboardInterrupt as e:
                interrupted = e
    if interrupted is not None:
        raise interrupted


_pool: RowPool | None = None


def _reset_pool_after_fork() -> None:
    global _pool
    _pool = None   # the worker threads do not exist in a forked child


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_pool_after_fork)


def _shared_pool(n_threads: int) -> RowPool:
    global _pool
    pool = _pool
    if pool is None:
        pool = _pool = RowPool()
    if len(pool.workers) < n_threads - 1:
        pool.grow(n_threads - 1)
    return pool


def run_rows(call, r0: int, r1: int, n_threads: int, args: tuple) -> None:
    """``call(a, b, *args)`` over rows ``r0:r1``, in up to ``n_threads`` contiguous shares at once.

    >>> total = []
    >>> run_rows(lambda a, b: total.append(b - a), 3, 10, 1, ())
    >>> total
    [7]
    """
    if n_threads > 1 and r1 - r0 > 1:
        _shared_pool(n_threads).run(lambda a, b, *rest: call(r0 + a, r0 + b, *rest), r1 - r0,
                                    min(n_threads, r1 - r0), args)
    else:
        call(r0, r1, *args)
