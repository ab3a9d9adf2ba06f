"""The boundaries of a text as a PNG (matplotlib): each character, a coloured bar under it for each
layer whose detector fired (z = 1) after reading it, and a dotted line before each word's first
character, so whether the boundaries fall on word starts shows at a glance.

`train.boundaries` writes it beside the HTML page when matplotlib is installed (the ``plot`` extra).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from minflux.files import atomic_path
from minflux_models.boundaries import is_separator

LAYER_COLOURS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]
SHOWN_SEPARATORS = "⏎→"  # how `train.boundaries.display_symbols` shows a line end and a tab


def word_starts(symbols: list[str]) -> list[int]:
    """The positions of the characters that begin a word: not a separator, and first or after one.

    >>> word_starts(list("the cat_sat ⏎on"))
    [0, 4, 8, 13]
    """
    gap = lambda s: is_separator(s) or s in SHOWN_SEPARATORS  # noqa: E731
    return [i for i, s in enumerate(symbols) if not gap(s) and (i == 0 or gap(symbols[i - 1]))]


def matplotlib_missing() -> bool:
    """Whether matplotlib cannot be imported (then there is no picture).

    >>> import sys, unittest.mock
    >>> with unittest.mock.patch.dict(sys.modules, {"matplotlib": None}):
    ...     matplotlib_missing()
    True
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return True
    return False


def render_png(symbols: list[str], z: np.ndarray, target: str | Path, title: str = "HM-LSTM boundaries",
               width: int = 80) -> list[int]:
    """Draw ``symbols`` with each layer's z = 1 (``z`` of shape (len(symbols), layers)) to PNG file
    ``target``, in rows of ``width`` characters; returns the word starts it marked. Needs matplotlib::

        render_png(list("the cat"), np.array([[0], [0], [1], [1], [0], [0], [1]]), "z.png")  # [0, 4]
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    layers = z.shape[1]
    starts = word_starts(symbols)
    rows = max(1, -(-len(symbols) // width))
    fig, axes = plt.subplots(rows, 1, figsize=(max(6.0, 0.16 * min(width, len(symbols)) + 1.5),
                                               0.9 + (0.45 + 0.22 * layers) * rows), squeeze=False)
    for row, ax in enumerate(axes[:, 0]):
        first = row * width
        chunk = range(first, min(first + width, len(symbols)))
        for i in chunk:
            x = i - first
            ax.text(x, layers + 0.1, symbols[i], ha="center", va="bottom", family="monospace", fontsize=9)
            for layer in range(layers):
                if z[i, layer] > 0.5:
                    ax.add_patch(Rectangle((x - 0.4, layers - 1 - layer + 0.15), 0.8, 0.7,
                                           color=LAYER_COLOURS[layer % len(LAYER_COLOURS)]))
        for i in (s for s in starts if s in chunk):
            ax.axvline(i - first - 0.5, color="#777777", linestyle=":", linewidth=0.9)
        ax.set_xlim(-0.7, width - 0.3)
        ax.set_ylim(0, layers + 1.1)
        ax.set_yticks([layers - 1 - layer + 0.5 for layer in range(layers)],
                      [f"layer {layer + 1}" for layer in range(layers)], fontsize=8)
        ax.set_xticks([])
        for side in ("top", "right", "bottom"):
            ax.spines[side].set_visible(False)
    rates = z.mean(axis=0) if len(z) else np.zeros(layers)
    axes[0, 0].set_title(f"{title}: z = 1 after a character "
                         f"({', '.join(f'layer {k + 1} {r:.0%}' for k, r in enumerate(rates))}); "
                         "dotted: word starts", fontsize=9, loc="left")
    fig.tight_layout()
    target = Path(target)
    try:
        with atomic_path(target) as tmp:
            fig.savefig(tmp, dpi=110, format="png")
    finally:
        plt.close(fig)
    return starts
