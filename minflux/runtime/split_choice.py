"""Whether a repeated call gains from splitting over threads, learned from its own first calls.

Handing a share to a sleeping worker costs the time its core takes to wake, which differs between
machines by an order of magnitude (a few microseconds on an idle bare-metal core; 25-55 us on a
2-core virtual machine whose idle cores halt, measured through `minflux.runtime.row_pool`), so no
fixed size says where a split starts to pay. A large kernel's launcher, a node's gradient sums, a
product cut into shares and each step of a native replay that runs commands at once therefore time
their first calls alternately on one thread and split, `TRIES` of each, and keep the faster way for
good. The way a call runs never changes its result: each row, share or command is the same call
whichever thread runs it.

>>> choice, ways = SplitChoice(), []
>>> for _ in range(2 * TRIES):      # measuring: split, then one thread, in turn
...     n = choice.threads(2)
...     ways.append(n)
...     choice.took(n, 0.4 if n == 2 else 1.0)
>>> ways, choice.splits, choice.threads(2)
([2, 1, 2, 1, 2, 1], True, 2)
"""
from __future__ import annotations

import time

__all__ = ["TRIES", "SplitChoice"]

TRIES = 3
"""Calls timed each way before the choice is made; the best of them counts."""


class SplitChoice:
    """The choice of one repeated call: ``splits`` is None while measuring, then True or False.

    >>> choice = SplitChoice()
    >>> for n, seconds in [(1, 1.0), (2, 1.5)] * TRIES:
    ...     choice.took(n, seconds)
    >>> choice.threads(2), choice.splits
    (1, False)
    """

    __slots__ = ("best", "counts", "splits")

    def __init__(self):
        self.best = [float("inf"), float("inf")]   # one thread, split
        self.counts = [0, 0]
        self.splits: bool | None = None

    def threads(self, free: int) -> int:
        """The threads the next call runs on, given the ``free`` ones: while measuring, split and
        one thread in turn (split first)."""
        if free <= 1 or self.splits is False:
            return 1
        return free if self.splits or self.counts[1] <= self.counts[0] else 1

    def run(self, free: int, work) -> None:
        """Call ``work(n_threads)`` on the threads this choice gives for ``free`` ones, timing the call
        while measuring (only where a second thread was free: a busy machine says nothing of splitting).

        >>> choice = SplitChoice()
        >>> choice.run(2, lambda n: None); choice.counts
        [0, 1]
        """
        n_threads = self.threads(free)
        if self.splits is not None or free <= 1:
            work(n_threads)
            return
        start = time.perf_counter()
        work(n_threads)
        self.took(n_threads, time.perf_counter() - start)

    def took(self, n_threads: int, seconds: float) -> None:
        """Note that a call on ``n_threads`` threads took ``seconds``."""
        if self.splits is not None:
            return
        way = int(n_threads > 1)
        self.counts[way] += 1
        self.best[way] = min(self.best[way], seconds)
        if min(self.counts) >= TRIES:
            self.splits = self.best[1] < self.best[0]
