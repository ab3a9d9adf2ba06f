"""What training does differently on several ranks (``mpiexec -n N python -m train ...``).

The global ``train.batch_size`` streams are split into N equal contiguous blocks, one per rank: rank
r reads streams ``r * B/N .. (r + 1) * B/N - 1`` of every window, so together the ranks read exactly
the windows one process would. The loss is each rank's mean over its block; averaging the gradients
(and the loss) over ranks gives the gradient of the global mean, which the optimiser (and its
global-norm clipping) then sees on every rank alike. Validation splits its streams the same way and
sums the per-rank totals. Checkpoints hold the recurrent state of all B streams (gathered on rank 0),
so a checkpoint does not depend on the number of ranks that wrote it.

With one rank every method here is the identity and costs nothing.

>>> dp = DataParallel(batch_size=4)
>>> dp.size, dp.local_batch, dp.is_main
(1, 4, True)
"""
from __future__ import annotations

import numpy as np

from minflux import distributed
from minflux import tree as mf_tree

from .config import ConfigError
from .data.batching import Window

BUILD_TIMEOUT = 3600.0  # seconds the other ranks wait for rank 0 to build the token cache


class _Discard:
    """Stands in for the metrics log on the ranks that do not write files."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None


class DataParallel:
    """This rank's share of a global batch of ``batch_size`` streams, and the reductions over ranks."""

    def __init__(self, batch_size: int):
        distributed.init()
        self.rank, self.size, self.is_main = distributed.rank(), distributed.size(), distributed.is_main()
        if batch_size % self.size:
            fits = [n for n in range(1, batch_size + 1) if batch_size % n == 0]
            raise ConfigError(f"train.batch_size = {batch_size} streams cannot be split evenly over "
                              f"{self.size} ranks; run with a number of ranks that divides it "
                              f"({', '.join(map(str, fits))}) or set train.batch_size to a multiple of "
                              f"{self.size} (--set train.batch_size=...)")
        self.local_batch = batch_size // self.size
        self.rows = slice(self.rank * self.local_batch, (self.rank + 1) * self.local_batch)

    def metrics(self, log):
        """``log`` on rank 0; elsewhere an object that writes nothing."""
        return log if self.is_main else _Discard()

    def once(self, build):
        """``build()`` on rank 0 first, then (after a barrier) on the other ranks, so that something
        cached on disk (the token cache) is built once and read by the rest."""
        if self.is_main:
            result = build()
            distributed.barrier(timeout=BUILD_TIMEOUT)
            return result
        distributed.barrier(timeout=BUILD_TIMEOUT)
        return build()

    def from_main(self, value):
        """Rank 0's ``value`` (any picklable object) on every rank."""
        return distributed.broadcast_object(value) if self.size > 1 else value

    def same_everywhere(self, tree):
        """Rank 0's arrays of ``tree`` on every rank (parameters start identical)."""
        return distributed.broadcast_tree(tree)

    def shard(self, window: Window) -> Window:
        """This rank's streams of a training window (training drops the tail, so every window has
        all ``batch_size`` streams)."""
        if self.size == 1:
            return window
        return Window(window.index, window.inputs[self.rows], window.targets[self.rows], window.first)

    def mean_rates(self, rates):
        """The boundary rates averaged over ranks (None stays None). The loss and the gradients are
        averaged inside the training step (`train.step.training_step`)."""
        if self.size == 1 or rates is None:
            return rates
        return distributed.allreduce_tree(np.array(rates, np.float64))

    def agree(self, stop: bool, elapsed: float) -> tuple[bool, float]:
        """Whether any rank was asked to stop, and the longest elapsed time: so all stop together."""
        if self.size == 1:
            return stop, elapsed
        flags = distributed.allreduce_tree(np.array([float(stop), elapsed]), op="max")
        return bool(flags[0]), float(flags[1])

    def gather_state(self, state):
        """The recurrent state of all streams on rank 0 (None elsewhere), to be checkpointed."""
        if self.size == 1 or state is None:
            return state
        return distributed.gather_rows(state)

    def local_state(self, state):
        """This rank's rows of a recurrent state of all streams (from a checkpoint)."""
        if self.size == 1 or state is None:
            return state
        return mf_tree.map_arrays(lambda a: a[self.rows], state, trainable_only=False)

    def combine(self, result):
        """The evaluation over every rank's streams from each rank's share."""
        from .evaluate import Evaluation

        if self.size == 1:
            return result
        total, chars = distributed.allreduce_tree(np.array([result.nats * result.chars, result.chars],
                                                           np.float64), op="sum")
        stats = result.boundaries
        if stats is not None and stats.fired is not None:   # every rank's boundary counts, summed
            steps, fired, counts = distributed.allreduce_tree(
                [np.array([stats.steps], np.int64), stats.fired.astype(np.int64),
                 stats.counts.astype(np.int64)], op="sum")
            stats = type(stats)(int(steps[0]), fired, counts)
        return Evaluation(float(total / chars), int(chars), result.streams, stats)
