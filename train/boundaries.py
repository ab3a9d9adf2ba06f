"""Where each HM-LSTM layer fires its boundary detector (z = 1) over a piece of text.

    python -m train.boundaries RUN_DIR --text "..." [--html FILE] [--width 80]
                               [--checkpoint best|latest]
    python -m train.boundaries RUN_DIR --file PATH [--batch-size B]

With ``--text``, prints the text with one row of marks per layer (``|`` where z = 1 after reading that
character) and writes a self-contained HTML page (no scripts, no external files) to
RUN_DIR/boundaries.html, and beside it a PNG with the word starts marked (`train.boundary_picture`;
with matplotlib, the ``plot`` extra). With ``--file``, reads the whole file (a Penn Treebank character
file when the run's corpus is ``ptb``) with the state carried over ``B`` contiguous streams and prints
each layer's rate of z = 1 by position in the word: on separators (whitespace, ``_``), on first
letters, second letters, and so on; both z = 1 after reading the character and FLUSH on it (z = 1
after the character before: the layer starts a new segment there, and the layer above was updated
with the last one).
"""
from __future__ import annotations

import argparse
import html
import sys
from pathlib import Path

import numpy as np

import minflux as mf
from minflux.files import write_atomically

from minflux_models.boundaries import positions_in_words, rates_by_position

from .boundary_picture import matplotlib_missing, render_png
from .cli import command, prog
from .data import StreamBatcher, Vocabulary, ptb_symbols
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
        raise ValueError("the text is empty; give the characters to mark")
    with mf.no_grad():
        _, _, z = model(mf.to_device(tokens[None, :], device), model.initial_state(1))
    if z is None:
        raise ValueError("this model has no boundary detectors (an LSTM); boundaries need an HM-LSTM run")
    return tokens, np.asarray(mf.to_numpy(z))[0]


def boundaries_over_tokens(model, tokens: np.ndarray, batch_size: int = 32, seq_len: int = 100,
                           device: str = "cpu") -> np.ndarray:
    """z after reading each of ``tokens[:-1]``, ``(N - 1, L-1)``, over ``batch_size`` streams with the
    state carried (the layout of `train.data.StreamBatcher`, as in evaluation).

    >>> class FiresOnSpace:
    ...     def initial_state(self, batch): return []
    ...     def __call__(self, tokens, state):
    ...         return None, state, (tokens == 0)[..., None].astype(float)
    >>> z = boundaries_over_tokens(FiresOnSpace(), np.array([1, 0, 2, 0, 1, 1]), batch_size=2, seq_len=2)
    >>> z[:, 0].tolist()
    [0.0, 1.0, 0.0, 1.0, 0.0]
    """
    from .evaluate import take_rows

    batch_size = max(1, min(batch_size, len(tokens) - 1))
    z_all = None
    state = model.initial_state(batch_size)
    windows = zip(StreamBatcher(tokens, batch_size, seq_len),
                  StreamBatcher(np.arange(len(tokens)), batch_size, seq_len))  # where each input lies
    with mf.no_grad():
        for window, where in windows:
            if window.streams < batch_size:
                state = take_rows(state, window.streams)
            _, state, z = model(mf.to_device(window.inputs, device), state)
            if z is None:
                raise ValueError("this model has no boundary detectors (an LSTM); boundaries need an "
                                 "HM-LSTM run")
            z = np.asarray(mf.to_numpy(z))
            if z_all is None:
                z_all = np.zeros((len(tokens) - 1, z.shape[-1]), z.dtype)
            z_all[where.inputs.reshape(-1)] = z.reshape(-1, z.shape[-1])
    return z_all


def position_table(rows: list[tuple], columns: list[str]) -> str:
    """A Markdown table of `models.boundaries.rates_by_position` rows under ``columns`` (one per rate).

    >>> print(position_table([("separator", 10, [0.5]), ("letter 1", 4, [0.25])], ["layer 1 z = 1"]))
    | position in word | characters | layer 1 z = 1 |
    |---|---|---|
    | separator | 10 | 50.0% |
    | letter 1 | 4 | 25.0% |
    """
    lines = ["| position in word | characters | " + " | ".join(columns) + " |",
             "|" + "---|" * (len(columns) + 2)]
    lines += [f"| {label} | {count:,} | " + " | ".join(f"{r:.1%}" for r in rates) + " |"
              for label, count, rates in rows]
    return "\n".join(lines)


def file_symbols(path: Path, corpus: str) -> str:
    """The symbols of a text file as the run's corpus reads them (PTB files: `ptb_symbols`)."""
    text = Path(path).read_text(encoding="utf-8")
    return ptb_symbols(text, path) if corpus == "ptb" else text


def rates_over_file(model, vocab: Vocabulary, path: Path, corpus: str, batch_size: int = 32,
                    seq_len: int = 100, device: str = "cpu") -> tuple[list[str], list[tuple]]:
    """``(columns, rows)``: `rates_by_position` over a whole file, for each layer both ``z = 1`` after
    reading the character and FLUSH on it (``z = 1`` after the character before, which starts a new
    segment there). Symbols outside the vocabulary are an error.
    """
    symbols = file_symbols(path, corpus)
    tokens = vocab.encode(symbols)
    z = boundaries_over_tokens(model, np.asarray(tokens, np.int64), batch_size, seq_len, device)
    flush = np.concatenate([np.zeros_like(z[:1]), z[:-1]])
    shown = display_symbols(vocab, tokens[:-1])
    positions = positions_in_words([" " if s in "⏎→" else s for s in shown])
    layers = range(1, z.shape[1] + 1)
    columns = [f"layer {l}: z = 1 after it" for l in layers] + [f"layer {l}: flushes on it" for l in layers]
    return columns, rates_by_position(np.concatenate([z, flush], axis=1), positions)


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
    from .runs import RunError, add_run_arguments, open_run

    parser = argparse.ArgumentParser(prog=prog("train.boundaries"), description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a run directory written by python -m train (an HM-LSTM)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", help="the text to read and mark")
    source.add_argument("--file", help="a whole file: print the rate of z = 1 by position in the word")
    parser.add_argument("--batch-size", type=int, default=32, help="streams for --file (default 32)")
    parser.add_argument("--html", default=None,
                        help="where to write the page (default RUN_DIR/boundaries.html; the PNG goes beside it)")
    parser.add_argument("--width", type=int, default=80, help="characters per terminal row")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if args.width < 1 or args.batch_size < 1:
        parser.error(f"--width and --batch-size must be >= 1, got {args.width} and {args.batch_size}")
    run = open_run(args.run_dir, args.checkpoint, args.device)
    if args.file:
        try:
            columns, rows = rates_over_file(run.model, run.vocab, Path(args.file), run.cfg.data.corpus,
                                            args.batch_size, run.cfg.train.seq_len, run.device)
        except UnicodeDecodeError as exc:
            raise RunError(f"--file {args.file} is not UTF-8 text (byte {exc.start}); give a text file") \
                from None
        except OSError as exc:
            raise RunError(f"--file {args.file}: cannot read it: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise RunError(f"--file {args.file}: {exc}") from None
        print(f"{run.path} [{run.checkpoint_name} checkpoint, step {run.step}] z = 1 by position in the word "
              f"over {args.file}:\n")
        print(position_table(rows, columns))
        return 0
    try:
        tokens, z = boundary_values(run.model, run.vocab, args.text, run.device)
    except ValueError as exc:
        raise RunError(f"--text: {exc}") from None
    symbols = display_symbols(run.vocab, tokens)
    print(render_terminal(symbols, z, args.width))
    rates = ", ".join(f"layer {i + 1} {r:.1%}" for i, r in enumerate(z.mean(axis=0)))
    target = Path(args.html) if args.html else run.path.path / "boundaries.html"
    title = f"{run.cfg.name}: HM-LSTM boundaries"
    write_atomically(target, render_html(symbols, z, title))
    print(f"\nz = 1 rates: {rates}\nwrote {target}")
    if matplotlib_missing():
        print("no PNG: matplotlib is not installed (pip install 'minflux[plot]')")
        return 0
    picture = target.with_suffix(".png")
    starts = render_png(symbols, z, picture, title, args.width)
    print(f"wrote {picture} ({len(starts)} word starts marked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
