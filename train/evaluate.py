"""Bits per character over a whole split, with the recurrent state carried from a cold start.

    python -m train.evaluate RUN_DIR [--split valid|test|train] [--checkpoint best|latest]
                             [--batch-size B]

The split is cut into B contiguous streams (see `train.data.batching`); every character after the
first is predicted exactly once, and the report says how many streams were used (more streams means
more cold starts, so a slightly higher bits-per-character figure).
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field

import numpy as np

import minflux as mf
from minflux_models.boundaries import BoundaryStats

from .cli import command, prog
from .data import StreamBatcher
from .data.batching import block


@dataclass(frozen=True)
class Evaluation:
    """The result of `evaluate_tokens`: mean loss in nats and in bits per character, and coverage.

    >>> print(Evaluation(nats=math.log(2), chars=1000, streams=4))
    1.0000 bits per character over 1,000 characters (4 streams)
    """

    nats: float
    chars: int
    streams: int
    boundaries: BoundaryStats | None = field(default=None, compare=False)  # an HM-LSTM's, else None

    @property
    def bpc(self) -> float:
        return self.nats / math.log(2)

    def __str__(self) -> str:
        return f"{self.bpc:.4f} bits per character over {self.chars:,} characters ({self.streams} streams)"


def take_rows(state, rows: int):
    """The first ``rows`` streams of a recurrent state (every array has the batch on axis 0).

    >>> take_rows({"h": np.zeros((4, 2))}, 3)["h"].shape
    (3, 2)
    """
    return mf.tree.map_arrays(lambda a: a[:rows], state, trainable_only=False)


def evaluate_tokens(model, tokens: np.ndarray, batch_size: int, seq_len: int, device: str = "cpu",
                    max_chars: int = 0, on_window=None, shard: tuple[int, int] = (0, 1)) -> Evaluation:
    """Mean cross-entropy of ``model`` predicting ``tokens`` (every token after the first, once).

    ``max_chars`` > 0 evaluates only the first ``max_chars + 1`` tokens. The model is called as
    ``model(inputs, state) -> (logits, state, boundaries)`` with ``model.initial_state(streams)``.
    ``shard=(rank, ranks)`` evaluates only that rank's contiguous block of the streams (the result's
    ``chars`` says how many it predicted; ``streams`` is still the total). When the model returns
    boundaries (an HM-LSTM), the result's ``boundaries`` holds their `BoundaryStats` (each layer's
    rate and FLUSH / UPDATE / COPY fractions over the characters this rank evaluated).

    >>> class Uniform:  # every one of 4 symbols with probability 1/4: exactly 2 bits
    ...     def initial_state(self, batch): return [np.zeros((batch, 1))]
    ...     def __call__(self, tokens, state): return np.zeros(tokens.shape + (4,)), state, None
    >>> result = evaluate_tokens(Uniform(), np.arange(101) % 4, batch_size=3, seq_len=10)
    >>> round(result.bpc, 6), result.chars, result.streams
    (2.0, 100, 3)
    >>> evaluate_tokens(Uniform(), np.arange(101) % 4, batch_size=3, seq_len=10, shard=(1, 2)).chars
    33
    """
    if max_chars:
        tokens = tokens[:max_chars + 1]
    batch_size = max(1, min(batch_size, len(tokens) - 1))
    batcher = StreamBatcher(tokens, batch_size, seq_len)
    mine = block(batch_size, *shard)
    total, count = 0.0, 0
    held = mine.stop - mine.start
    state = model.initial_state(held) if held else None
    stats, previous = None, None
    with mf.no_grad():
        for window in batcher:
            rows = min(mine.stop, window.streams) - mine.start
            if rows > 0:
                if rows < held:
                    state, held = take_rows(state, rows), rows
                part = slice(mine.start, mine.start + rows)
                inputs, targets = mf.to_device((window.inputs[part], window.targets[part]), device)
                logits, state, boundaries = model(inputs, state)
                total += float(mf.to_numpy(mf.cross_entropy(logits, targets, reduction="sum")))
                count += rows * window.steps
                if boundaries is not None and boundaries.shape[-1]:
                    stats = stats or BoundaryStats()
                    z = np.asarray(mf.to_numpy(boundaries))
                    stats.add(z, None if previous is None else previous[:rows])
                    previous = z[:, -1]
            if on_window is not None:
                on_window(window)
    return Evaluation(total / count if count else 0.0, count, batch_size, stats)


@command
def main(argv: list[str] | None = None) -> int:
    """Command line: evaluate a run on one split; returns the exit status."""
    from .runs import add_run_arguments, open_run, split_tokens

    parser = argparse.ArgumentParser(prog=prog("train.evaluate"), description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", help="a run directory written by python -m train")
    parser.add_argument("--split", default="valid", choices=["train", "valid", "test"])
    parser.add_argument("--batch-size", type=int, default=0,
                        help="streams to evaluate with (default: the run's evaluation batch size)")
    add_run_arguments(parser)
    args = parser.parse_args(argv)
    if args.batch_size < 0:
        parser.error(f"--batch-size must be >= 1 (0: the run's evaluation batch size), got {args.batch_size}")
    run = open_run(args.run_dir, args.checkpoint, args.device)
    corpus = run.corpus()
    tokens = split_tokens(corpus, args.split, run.cfg)
    batch = args.batch_size or run.cfg.train.eval_batch_size or run.cfg.train.batch_size
    from .progress import progress_bar

    with progress_bar(total=len(tokens) - 1, desc=f"evaluate {args.split}", unit="char") as bar:
        result = evaluate_tokens(run.model, tokens, batch, run.cfg.train.seq_len, run.device,
                                 on_window=lambda w: bar.update(w.targets.size))
    print(f"{run.path} [{run.checkpoint_name} checkpoint, step {run.step}] {args.split}: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
