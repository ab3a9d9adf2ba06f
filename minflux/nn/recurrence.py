"""Recurrence: run a pure recurrent cell over a sequence, carrying its state."""
from __future__ import annotations

from typing import Any

from ..ops import unstack

from .module import Module


def time_steps(xs) -> list:
    """The steps of a sequence: a list or tuple as it is, an array or Tensor unstacked along axis 0."""
    if isinstance(xs, (list, tuple)):
        return list(xs)
    return unstack(xs, axis=0)


class Recurrence(Module):
    """Apply ``cell`` to each step of a sequence: ``outputs, state = Recurrence(cell)(xs, state)``.

    ``xs`` is a list of per-step inputs or an array whose axis 0 is time; ``outputs`` is the list of
    per-step outputs and ``state`` the final state, which a truncated-BPTT loop passes to the next
    segment (``None`` starts from the cell's zero state).

    >>> import numpy as np, minflux as mf
    >>> rnn = mf.nn.Recurrence(mf.nn.LSTMCell(3, 4, rng=np.random.default_rng(0)))
    >>> outputs, (h, c) = rnn(np.ones((6, 2, 3), np.float32))
    >>> len(outputs), outputs[-1].shape, bool((outputs[-1] == h).all())
    (6, (2, 4), True)
    """

    def __init__(self, cell: Any):
        if not callable(cell):
            raise TypeError(f"Recurrence needs a callable cell, got {type(cell).__name__}")
        self.cell = cell

    def __call__(self, xs, state: Any = None) -> tuple[list, Any]:
        outputs = []
        for x in time_steps(xs):
            y, state = self.cell(x, state)
            outputs.append(y)
        return outputs, state
