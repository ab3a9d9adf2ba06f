"""Batches for truncated backpropagation through time: B contiguous streams read window by window.

A split of N tokens has N - 1 targets (every token after the first). They are cut into B contiguous
streams; stream b predicts targets ``start_b + 1 .. start_b + length_b`` and its windows of T steps are
read in order, so the recurrent state carried from one window to the next has seen exactly the text
before it. Consecutive windows overlap by one token (the last target of a window is the first input of
the next), so every target is predicted exactly once. When N - 1 is not a multiple of B, the first
``r = (N - 1) % B`` streams are one step longer and a final *tail* window of one step covers those r
streams (``drop_tail=True`` skips it, as training does: fewer than B targets per epoch).

A position in the data is just ``(epoch, window index)``; `StreamBatcher.window` reads any window
directly, which is what makes a run resumable.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Window:
    """One batch: ``inputs`` and ``targets`` of shape (streams, steps), and where it lies.

    ``index`` is the window number within the epoch; ``first`` says the recurrent state must start
    from zeros; ``streams`` < the batch size only for the tail window (state rows ``:streams`` go on).
    """

    index: int
    inputs: np.ndarray
    targets: np.ndarray
    first: bool

    @property
    def streams(self) -> int:
        return self.inputs.shape[0]

    @property
    def steps(self) -> int:
        return self.inputs.shape[1]


class StreamBatcher:
    """Windows of ``seq_len`` steps over ``batch_size`` contiguous streams of ``tokens``.

    Ten tokens have nine targets; two streams predict 1..5 and 6..9, the tail window the last of 1..5:

    >>> b = StreamBatcher(np.arange(10), batch_size=2, seq_len=3)
    >>> [w.inputs.tolist() for w in b]
    [[[0, 1, 2], [5, 6, 7]], [[3], [8]], [[4]]]
    >>> [w.targets.tolist() for w in b]
    [[[1, 2, 3], [6, 7, 8]], [[4], [9]], [[5]]]
    """

    def __init__(self, tokens: np.ndarray, batch_size: int, seq_len: int, drop_tail: bool = False):
        tokens = np.asarray(tokens)
        if tokens.ndim != 1:
            raise ValueError(f"tokens must be one-dimensional, got shape {tokens.shape}")
        if batch_size < 1 or seq_len < 1:
            raise ValueError(f"batch_size and seq_len must be >= 1, got {batch_size} and {seq_len}")
        n_targets = len(tokens) - 1
        if n_targets < batch_size:
            raise ValueError(f"{len(tokens):,} tokens cannot fill {batch_size} streams; use a batch size "
                             f"of at most {max(n_targets, 1)}")
        self.tokens, self.batch_size, self.seq_len = tokens, batch_size, seq_len
        self.stream_length, self.extra = divmod(n_targets, batch_size)
        self.drop_tail = drop_tail
        b = np.arange(batch_size)
        self.starts = b * self.stream_length + np.minimum(b, self.extra)
        self.main_windows = -(-self.stream_length // seq_len)
        self.has_tail = self.extra > 0 and not drop_tail

    def __len__(self) -> int:
        return self.main_windows + int(self.has_tail)

    @property
    def targets_per_epoch(self) -> int:
        """How many targets one pass predicts (all N - 1 unless the tail is dropped)."""
        return self.stream_length * self.batch_size + (self.extra if self.has_tail else 0)

    def window(self, index: int) -> Window:
        """Window ``index`` (0 <= index < len(self)) of an epoch."""
        if not 0 <= index < len(self):
            raise IndexError(f"window {index} is outside 0..{len(self) - 1}")
        if index < self.main_windows:
            offset = index * self.seq_len
            steps = min(self.seq_len, self.stream_length - offset)
            rows = self.starts
        else:
            offset, steps, rows = self.stream_length, 1, self.starts[:self.extra]
        positions = rows[:, None] + offset + np.arange(steps)[None, :]
        return Window(index, self.tokens[positions].astype(np.int64),
                      self.tokens[positions + 1].astype(np.int64), first=index == 0)

    def __iter__(self):
        return (self.window(i) for i in range(len(self)))


def block(items: int, rank: int, ranks: int) -> slice:
    """Rank ``rank``'s contiguous share of ``items`` split as evenly as possible over ``ranks``
    (the first ``items % ranks`` ranks get one more).

    >>> [block(5, r, 2) for r in range(2)]
    [slice(0, 3, None), slice(3, 5, None)]
    """
    base, extra = divmod(items, ranks)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))
