"""Where each HM-LSTM layer fires its boundary detector (z = 1) over a piece of text.

    python -m train.boundaries RUN_DIR --text "..." [--html FILE] [--width 80]
                               [--checkpoint best|latest]

Prints the text with one row of marks per layer (``|`` where z = 1 after reading that character) and
writes a self-contained HTML page (no scripts, no external files) to RUN_DIR/boundaries.html.
"""
from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

import numpy as np

import minflux as mf
from minflux.files import write_atomically

from .cli import command, prog
from .data import Vocabulary
from .sample import prime_tokens

LAYER_COLOURS = ["#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def boundary_values(model, vocab: Vocabulary, text: str, device: str = "cpu"):
    """``(tokens, z)``: the tokens of ``text`` and z of shape (len(tokens), layers - 1) in {0, 1}.

    >>> class FiresOnSpace:  # a stand-in model whose one boundary detector fires after a space (token 0)
    ...     def initial_state(self, batch): return []
    ...     def __call__(self, tokens, state):
    ...         return None, state, (tokens == 0)[..., None].astype(float)
    >>> tokens, z = boundary_values(FiresOnSpace(), Vocabulary.from_text(" ab"), "ab ab")
    >>> z[:, 0].tolist()
    [0.0, 0.0, 1.0, 0.0, 0.0]
    """
    tokens = prime_tokens(vocab, text) if text else None
    if tokens is None or len(tokens) == 0:
        raise ValueError("--text must not be empty")
    with mf.no_grad():
        _, _, z = model(mf.to_device(tokens[None, :], device), model.initial_state(1))
    if z is None:
        raise ValueError("this model has no boundary detectors (an LSTM); boundaries need an HM-LSTM run")
    return tokens, np.asarray(mf.to_numpy(z))[0]


def display_symbols(vocab: Vocabulary, tokens) -> list[str]:
    """One printable character per token (line ends as ⏎, other control characters as ·).

    >>> display_symbols(Vocabulary(("\\n", "a")), [1, 0])
    ['a', '⏎']
    """
    out = []
    for t in tokens:
        s = vocab.symbols[int(t)]
        if vocab.kind == "bytes":
            s = chr(s) if 32 <= s < 127 else ("\n" if s == 10 else "\x00")
        out.append("⏎" if s == "\n" else "→" if s == "\t" else s if s.isprintable() else "·")
    return out


def render_terminal(symbols: list[str], z: np.ndarray, width: int = 80) -> str:
    """The text in rows of ``width`` with a row of ``|`` marks under it for each layer.

    >>> print(render_terminal(list("abcd"), np.array([[0], [1], [0], [1]])))
    text    abcd
    layer 1  | |
    """
    layers = z.shape[1]
    lines = []
    for start in range(0, len(symbols), width):
        lines.append("text    " + "".join(symbols[start:start + width]))
        for layer in range(layers):
            marks = "".join("|" if v > 0.5 else " " for v in z[start:start + width, layer])
            lines.append(f"layer {layer + 1} " + marks.rstrip())
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def render_html(symbols: list[str], z: np.ndarray, title: str = "HM-LSTM boundaries") -> str:
    """A self-contained HTML page: each character with one coloured bar per layer where z = 1.

    >>> page = render_html(list("ab"), np.array([[1.0], [0.0]]))
    >>> page.count('class="z on1"'), "layer 1: z = 1 on 50.0% of characters" in page
    (1, True)
    """
    layers = z.shape[1]
    rates = z.mean(axis=0) if len(z) else np.zeros(layers)
    style = ["body{font-family:sans-serif;margin:1.5em}",
             ".t{font-family:monospace;font-size:15px;line-height:1}",
             ".c{display:inline-block;text-align:center;width:0.62em;margin:0 0 6px 0;vertical-align:top}",
             ".ch{display:block;height:1.2em;white-space:pre}",
             ".z{display:block;height:5px;margin-top:2px;background:#eee}"]
    style += [f".on{layer + 1}{{background:{LAYER_COLOURS[layer % len(LAYER_COLOURS)]}}}"
              for layer in range(layers)]
    legend = " ".join(f'<span style="color:{LAYER_COLOURS[layer % len(LAYER_COLOURS)]}">&#9632; layer '
                      f"{layer + 1}: z = 1 on {rates[layer]:.1%} of characters</span>"
                      for layer in range(layers))
    cells = []
    for i, s in enumerate(symbols):
        bars = "".join(f'<span class="z{" on" + str(layer + 1) if z[i, layer] > 0.5 else ""}"></span>'
                       for layer in range(layers))
        cells.append(f'<span class="c"><span class="ch">{html.escape(s)}</span>{bars}</span>')
        if s == "⏎":
            cells.append("<br>")
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{''.join(style)}</style></head><body>"
            f"<h1>{html.escape(title)}</h1><p>{legend}</p>"
            "<p>A bar under a character: that layer's boundary detector fired (z = 1) after reading it.</p>"
            f"<div class=\"t\">{''.join(cells)}</div></body></html>\n")


@command
def main(argv: list[str] | None = None) -> int:
    """Command line: print and draw a run's boundaries over a text; returns the exit status."""
    from .runs import add_run_arguments, open_run

    parser = argparse.ArgumentParser(prog=prog("train.boundaries"), description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a run directory written by python -m train (an HM-LSTM)")
    parser.add_argument("--text", required=True, help="the text to read")
    parser.add_argument("--html", default=None, help="where to write the page (default RUN_DIR/boundaries.html)")
    parser.add_argument("--width", type=int, default=80, help="characters per terminal row")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    run = open_run(args.run_dir, args.checkpoint, args.device)
    try:
        tokens, z = boundary_values(run.model, run.vocab, args.text, run.device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    symbols = display_symbols(run.vocab, tokens)
    print(render_terminal(symbols, z, args.width))
    rates = ", ".join(f"layer {i + 1} {r:.1%}" for i, r in enumerate(z.mean(axis=0)))
    target = Path(args.html) if args.html else run.path.path / "boundaries.html"
    write_atomically(target, render_html(symbols, z, f"{run.cfg.name}: HM-LSTM boundaries"))
    print(f"\nz = 1 rates: {rates}\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
