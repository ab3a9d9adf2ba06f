"""The HM-LSTM paper's output module: gated sum of every layer's hidden state, ReLU, softmax layer."""
from __future__ import annotations

from typing import Sequence

import numpy as np

import minflux as mf


class GatedOutput(mf.nn.Module):
    """``g_l = sigmoid(w_l . [h_1; ...; h_L])``, ``h_e = relu(sum_l g_l W_l h_l)``, logits ``= h_e V + b``.

    Takes the per-layer hidden sequences ``(B, T, H_l)`` and returns logits ``(B, T, vocab_size)``.

    >>> import numpy as np
    >>> out = GatedOutput((4, 3), 5, 7, rng=np.random.default_rng(0))
    >>> out([np.zeros((2, 1, 4), np.float32), np.zeros((2, 1, 3), np.float32)]).shape
    (2, 1, 7)
    """

    def __init__(self, hidden_sizes: Sequence[int], embed_size: int, vocab_size: int, *,
                 rng: np.random.Generator, dtype=None):
        init = mf.nn.init
        total = int(sum(hidden_sizes))
        self.gate_W = init.glorot_uniform(rng, total, len(hidden_sizes), dtype=dtype)
        self.gate_b = init.zeros(None, len(hidden_sizes), dtype=dtype)
        self.embed_W = [init.glorot_uniform(rng, h, embed_size, dtype=dtype) for h in hidden_sizes]
        self.embed_b = init.zeros(None, embed_size, dtype=dtype)
        self.out_W = init.glorot_uniform(rng, embed_size, vocab_size, dtype=dtype)
        self.out_b = init.zeros(None, vocab_size, dtype=dtype)

    def __call__(self, hs: Sequence):
        gates = mf.sigmoid(mf.concatenate(list(hs), axis=-1) @ self.gate_W + self.gate_b)
        gate_per_layer = mf.split(gates, len(hs), axis=-1)
        mixed = self.embed_b
        for gate, h, W in zip(gate_per_layer, hs, self.embed_W):
            mixed = mixed + gate * (h @ W)
        return mf.relu(mixed) @ self.out_W + self.out_b
