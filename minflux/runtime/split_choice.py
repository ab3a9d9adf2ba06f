"""Whether a repeated call gains from splitting over threads, learned from its own first calls.

Handing a share to a sleeping worker costs the time its core takes to wake, which differs between
machines by an order of magnitude (a few microseconds on an idle bare-metal core; 25-55 us on a
2-core virtual machine whose idle cores halt, measured through `minflux.runtime.row_pool`), so no
fixed size says where a split starts to pay. A large kernel's launcher, a node's gradient sums, a
product cut into shares and each step of a native replay that runs commands at once therefore time
their first calls alternately on one thread and split, `TRIES` of each, and keep the faster way,
trying the other way once every `RECHECK_EVERY` calls after: first calls made while something else
held a core choose wrongly, and each way's best time only falls as the machine frees up. The way a
call runs never changes its result: each row, share or command is the same call whichever thread
runs it.

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

__all__ = ["RECHECK_EVERY", "TRIES", "SplitChoice"]

TRIES = 3
"""Calls timed each way before the choice is made; the best of them counts."""

RECHECK_EVERY = 100
"""Once chosen, one call in this many (where a second thread is free) runs the other way, timed. A
2-core virtual machine's level moves by 10-20% from one minute to the next: on it, in one process of
four, the default step ran its largest products on one thread throughout (CPU / wall 1.07 against
1.19 in the others, 94 against 83-86 ms a step)."""


class SplitChoice:
    """The choice of one repeated call: ``splits`` is None while measuring, then True or False.

    >>> choice = SplitChoice()
    >>> for n, seconds in [(1, 1.0), (2, 1.5)] * TRIES:
    ...     choice.took(n, seconds)
    >>> choice.threads(2), choice.splits
    (1, False)
    """

    __slots__ = ("best", "counts", "splits", "calls", "gain")

    def __init__(self, gain: float = 0.0):
        self.best = [float("inf"), float("inf")]   # one thread, split
        self.counts = [0, 0]
        self.splits: bool | None = None
        self.calls = 0   # calls with a second thread free since the choice, the next recheck at `RECHECK_EVERY`
        self.gain = gain   # how much less time a split call must take to be chosen: 0.03 for 3%

    def threads(self, free: int) -> int:
        """The threads the next call runs on, given the ``free`` ones: while measuring, split and
        one thread in turn (split first); once chosen, the faster way, or the other way at a recheck."""
        if free <= 1:
            return 1
        if self.splits is None:
            return free if self.counts[1] <= self.counts[0] else 1
        return free if self.splits != self._rechecking() else 1

    def _rechecking(self) -> bool:
        return self.calls >= RECHECK_EVERY

    def run(self, free: int, work):
        """``work(n_threads)`` on the threads this choice gives for ``free`` ones, timing the call
        while measuring or rechecking (only where a second thread was free: a busy machine says nothing
        of splitting).

        >>> choice = SplitChoice()
        >>> choice.run(2, lambda n: n), choice.counts
        (2, [0, 1])
        """
        n_threads = self.threads(free)
        if free <= 1:
            return work(n_threads)
        if self.splits is not None and not self._rechecking():
            self.calls += 1
            return work(n_threads)
        start = time.perf_counter()
        result = work(n_threads)
        self.took(n_threads, time.perf_counter() - start)
        return result

    def took(self, n_threads: int, seconds: float) -> None:
        """Note that a call on ``n_threads`` threads took ``seconds``: while measuring, or at a recheck
        (which may turn the choice).

        >>> choice = SplitChoice()
        >>> for n, seconds in [(1, 1.0), (2, 1.5)] * TRIES:
        ...     choice.took(n, seconds)
        >>> choice.calls = RECHECK_EVERY; choice.threads(2)      # the recheck: split, once
        2
        >>> choice.took(2, 0.6); choice.splits, choice.threads(2)   # faster now: split from here on
        (True, 2)
        """
        way = int(n_threads > 1)
        self.counts[way] += 1
        self.best[way] = min(self.best[way], seconds)
        if min(self.counts) >= TRIES:
            self.splits = self.best[1] < self.best[0] * (1.0 - self.gain)
            self.calls = 0
