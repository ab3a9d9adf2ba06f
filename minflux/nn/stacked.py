"""RNN: a stack of recurrent layers, each a cell run over the whole sequence."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ._rng import as_generator
from .dropout import Dropout
from .module import Module
from .recurrence import time_steps


class RNN(Module):
    """Recurrent layers ``cell(sizes[k], sizes[k + 1], rng=rng)`` stacked: each runs over the whole
    sequence and its outputs are the next one's inputs (like ``torch.nn.GRU(num_layers=...)``).

    ``outputs, states = rnn(xs, states)``: ``xs`` is a list of per-step inputs or an array whose axis
    0 is time; ``outputs`` is the top layer's list of per-step outputs and ``states`` the tuple of
    each layer's final state, which a truncated-BPTT loop passes to the next segment (None starts
    every layer from its zero state). ``dropout`` applies `Dropout` to the outputs of every layer but
    the last, in training mode only. Extra keyword arguments go to every ``cell``.

    >>> import numpy as np, minflux as mf
    >>> rnn = mf.nn.RNN(mf.nn.GRUCell, [3, 8, 4], rng=np.random.default_rng(0))
    >>> outputs, states = rnn(np.ones((6, 2, 3), np.float32))
    >>> len(outputs), outputs[-1].shape, [h.shape for h in states]
    (6, (2, 4), [(2, 8), (2, 4)])
    """

    def __init__(self, cell: Callable, sizes: Sequence[int], *, rng, dropout: float = 0.0, **cell_options):
        sizes = list(sizes)
        if len(sizes) < 2 or any(not isinstance(n, int) or n <= 0 for n in sizes):
            raise ValueError(f"RNN needs sizes [n_in, hidden_1, ..., hidden_k] of positive ints (at least "
                             f"two), got {sizes!r}")
        rng = as_generator(rng, "RNN")
        self.cells = [cell(n_in, n_out, rng=rng, **cell_options) for n_in, n_out in zip(sizes, sizes[1:])]
        self.dropout = Dropout(dropout, rng=rng) if dropout else None

    def initial_state(self, batch_shape: tuple | int = ()) -> tuple:
        """Every layer's zero state for inputs with ``batch_shape`` leading axes."""
        return tuple(cell.initial_state(batch_shape) for cell in self.cells)

    def __call__(self, xs, states: Sequence[Any] | None = None) -> tuple[list, tuple]:
        if states is None:
            states = (None,) * len(self.cells)
        elif len(states) != len(self.cells):
            raise ValueError(f"RNN with {len(self.cells)} layers got {len(states)} states; pass one per "
                             f"layer, or None")
        steps = time_steps(xs)
        finals = []
        for k, (cell, state) in enumerate(zip(self.cells, states)):
            if k and self.dropout is not None:
                steps = [self.dropout(x) for x in steps]
            outputs = []
            for x in steps:
                y, state = cell(x, state)
                outputs.append(y)
            finals.append(state)
            steps = outputs
        return steps, tuple(finals)
