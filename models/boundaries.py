"""What the HM-LSTM's boundary detectors do: the slope schedule, firing rates, and the operations chosen.

Everything here reads the ``(B, T, L-1)`` array of boundaries ``z`` that `models.HMLSTM` returns (layer
``l``'s ``z_l(t)`` after reading character ``t``), so the model, the training loop, evaluation and the
command-line tools count the same way. Layer ``l`` at step ``t`` FLUSHes when ``z_l(t-1) = 1``, else
UPDATEs when the layer below fired, ``z_{l-1}(t) = 1`` (the input is layer 0 and always fires), else
COPYs; the top layer has no detector (``z_L = 0``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import minflux as mf

MIN_LAYERS = 2  # below this an HM-LSTM has no boundary detector: it is an LSTM


def annealed_slope(epoch: int, start: float = 1.0, rate: float = 0.04, limit: float = 5.0) -> float:
    """The slope annealing schedule ``a = min(limit, start + rate * epoch)`` of the HM-LSTM paper.

    >>> annealed_slope(0), annealed_slope(25), annealed_slope(50), annealed_slope(500)
    (1.0, 2.0, 3.0, 5.0)
    """
    return min(limit, start + rate * epoch)


def boundary_rates(boundaries) -> list[float]:
    """The fraction of steps on which each layer fired ``z = 1`` (a ``(B, T, L-1)`` array in).

    >>> boundary_rates(np.array([[[1.0, 0.0], [0.0, 0.0]]]))
    [0.5, 0.0]
    """
    z = np.asarray(mf.to_numpy(boundaries))
    return [float(r) for r in z.reshape(-1, z.shape[-1]).mean(axis=0)]


def operations(boundaries, previous=None) -> np.ndarray:
    """The operation of every layer at every step: ``(B, T, L)`` of 0 = COPY, 1 = UPDATE, 2 = FLUSH.

    ``previous`` is the ``(B, L-1)`` boundaries before the first step (the carried state's ``z``;
    zeros, as at a cold start, when None).

    >>> z = np.array([[[0.0], [1.0], [0.0]]])           # one detector, three steps
    >>> operations(z)[0].tolist()                       # layer 1 flushes after it fired; layer 2 updates then
    [[1, 0], [1, 1], [2, 0]]
    """
    z = np.asarray(mf.to_numpy(boundaries))
    batch, steps, detectors = z.shape
    before = np.zeros((batch, 1, detectors)) if previous is None else \
        np.asarray(mf.to_numpy(previous)).reshape(batch, 1, detectors)
    own = np.concatenate([before, z[:, :-1]], axis=1) > 0.5                      # z_l(t-1), l = 1..L-1
    own = np.concatenate([own, np.zeros((batch, steps, 1), bool)], axis=-1)      # the top layer never
    below = np.concatenate([np.ones((batch, steps, 1), bool), z > 0.5], axis=-1)  # z_{l-1}(t), z_0 = 1
    return np.where(own, 2, np.where(below, 1, 0))


@dataclass
class BoundaryStats:
    """Counts of ``z = 1`` and of FLUSH / UPDATE / COPY per layer, accumulated over windows.

    >>> stats = BoundaryStats()
    >>> stats.add(np.array([[[0.0], [1.0], [0.0], [0.0]]]))
    >>> stats.rates, stats.fractions("flush"), stats.fractions("copy")
    ([0.25], [0.25, 0.0], [0.0, 0.75])
    >>> print(stats)
    layer 1 z 0.250 (F 0.25 U 0.75 C 0.00) | layer 2 (F 0.00 U 0.25 C 0.75)
    """

    steps: int = 0
    fired: np.ndarray | None = None
    counts: np.ndarray | None = field(default=None, repr=False)   # (L, 3): COPY, UPDATE, FLUSH

    def add(self, boundaries, previous=None) -> None:
        """Count one ``(B, T, L-1)`` window of boundaries (``previous``: see `operations`)."""
        z = np.asarray(mf.to_numpy(boundaries))
        ops = operations(z, previous).reshape(-1, z.shape[-1] + 1)
        counts = np.stack([(ops == k).sum(axis=0) for k in range(3)], axis=-1)
        fired = (z > 0.5).reshape(-1, z.shape[-1]).sum(axis=0)
        if self.fired is None:
            self.fired, self.counts = fired, counts
        else:
            self.fired, self.counts = self.fired + fired, self.counts + counts
        self.steps += ops.shape[0]

    @property
    def rates(self) -> list[float]:
        """Each detector's fraction of steps with ``z = 1`` (layers 1..L-1)."""
        return [] if self.fired is None else [float(f) / self.steps for f in self.fired]

    def fractions(self, operation: str) -> list[float]:
        """Each layer's fraction of steps doing ``operation`` (``"flush"``, ``"update"`` or ``"copy"``)."""
        column = {"copy": 0, "update": 1, "flush": 2}[operation]
        return [] if self.counts is None else [float(c) / self.steps for c in self.counts[:, column]]

    def record(self) -> dict:
        """The statistics as plain lists, for a metrics record."""
        rounded = lambda values: [round(v, 5) for v in values]  # noqa: E731
        return {"boundary_rates": rounded(self.rates), "flush": rounded(self.fractions("flush")),
                "update": rounded(self.fractions("update")), "copy": rounded(self.fractions("copy"))}

    def __str__(self) -> str:
        rates = self.rates
        parts = []
        for l, (f, u, c) in enumerate(zip(*(self.fractions(k) for k in ("flush", "update", "copy")))):
            z = f" z {rates[l]:.3f}" if l < len(rates) else ""
            parts.append(f"layer {l + 1}{z} (F {f:.2f} U {u:.2f} C {c:.2f})")
        return " | ".join(parts)


def is_separator(symbol: str) -> bool:
    """Whether ``symbol`` separates words: whitespace, or ``_`` (the Penn Treebank files' word gap).

    >>> [is_separator(s) for s in ("_", " ", "\\n", "a", ",")]
    [True, True, True, False, False]
    """
    return symbol == "_" or symbol.isspace()


def positions_in_words(symbols) -> np.ndarray:
    """Each symbol's position in its word: 0 for a separator, 1 for a word's first letter, 2, ...

    >>> positions_in_words("the cat_s").tolist()
    [1, 2, 3, 0, 1, 2, 3, 0, 1]
    """
    out = np.zeros(len(symbols), np.int64)
    k = 0
    for n, s in enumerate(symbols):
        k = 0 if is_separator(s) else k + 1
        out[n] = k
    return out


def rates_by_position(z: np.ndarray, positions: np.ndarray, longest: int = 8) -> list[tuple]:
    """Rows ``(label, characters, rate per layer)`` for separators, first, second, ... letters.

    Positions beyond ``longest`` are pooled in one ``f"{longest + 1}+"`` row. ``z`` is ``(N, L-1)``
    aligned with ``positions`` (z after reading that character).

    >>> z = np.array([[0.0], [1.0], [0.0], [1.0], [1.0]])
    >>> rates_by_position(z, np.array([1, 2, 0, 1, 2]), longest=1)
    [('separator', 1, [0.0]), ('letter 1', 2, [0.5]), ('letter 2+', 2, [1.0])]
    """
    z = np.asarray(z, dtype=float)
    pooled = np.minimum(positions, longest + 1)
    rows = []
    for k in range(longest + 2):
        chosen = pooled == k
        if not chosen.any():
            continue
        label = "separator" if k == 0 else f"letter {k}" + ("+" if k == longest + 1 else "")
        rows.append((label, int(chosen.sum()), [float(r) for r in z[chosen].mean(axis=0)]))
    return rows
