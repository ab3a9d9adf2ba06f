"""The baseline: a stacked LSTM character language model with the HM-LSTM's embedding and output."""
from __future__ import annotations

from typing import Sequence

import numpy as np

import minflux as mf

from .output import GatedOutput


class LSTMLM(mf.nn.Module):
    """Embedding, stacked `minflux.nn.LSTMCell` layers and the gated output module.

    Same interface as `models.HMLSTM`: ``model(tokens, state) -> (logits, new_state, None)``.

    >>> import numpy as np
    >>> model = LSTMLM(7, embed_size=4, hidden_sizes=(5, 3), rng=np.random.default_rng(0))
    >>> logits, state, _ = model(np.zeros((2, 3), np.int64), model.initial_state(2))
    >>> logits.shape
    (2, 3, 7)
    """

    def __init__(self, vocab_size: int, *, embed_size: int = 128, hidden_sizes: Sequence[int] = (512, 512, 512),
                 output_embed_size: int | None = None, rng: np.random.Generator, dtype=None):
        self.vocab_size = vocab_size
        self.embed = mf.nn.Embedding(vocab_size, embed_size, rng=rng, dtype=dtype)
        sizes = list(hidden_sizes)
        self.cells = [mf.nn.LSTMCell(n_in, h, rng=rng, dtype=dtype)
                      for n_in, h in zip([embed_size] + sizes[:-1], sizes)]
        self.output = GatedOutput(sizes, output_embed_size or max(sizes), vocab_size, rng=rng, dtype=dtype)

    def initial_state(self, batch_size: int) -> list[dict]:
        """Zero ``h`` and ``c`` of shape ``(B, H)`` for every layer."""
        return [dict(zip(("h", "c"), cell.initial_state(batch_size))) for cell in self.cells]

    def __call__(self, tokens, state: list[dict]):
        inputs = mf.unstack(self.embed(tokens), axis=1)
        states = [(s["h"], s["c"]) for s in state]
        hidden_steps = [[] for _ in self.cells]
        for x in inputs:
            for l, cell in enumerate(self.cells):
                x, states[l] = cell(x, states[l])
                hidden_steps[l].append(x)
        logits = self.output([mf.stack(hs, axis=1) for hs in hidden_steps])
        return logits, [{"h": h, "c": c} for h, c in states], None
