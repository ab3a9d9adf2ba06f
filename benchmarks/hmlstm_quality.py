"""HM-LSTM quality on real text: train on Penn Treebank's validation characters, score on its test set.

    python benchmarks/hmlstm_quality.py [--run DIR] [--set KEY=VALUE ...]

Trains a 2 x 256 HM-LSTM (embedding 64, output embedding 256, batch 32, segments of 100, Adam 0.002,
global-norm clipping at 1, the paper's blend cell form and the authors' initialisation, no layer norm)
for 600 steps on ``ptb.char.valid.txt`` with ``python -m train``, then scores the final parameters on
the whole of ``ptb.char.test.txt`` (state carried over 32 streams) and reports where layer 1's boundary
detector fires by position in the word over the same file. Targets: at most 1.96 test bits per
character, and layer 1 firing on at least 80% of word-first letters (an independent PyTorch
implementation reached 1.952 and 87%). The test file is the run's "valid" split only so that the
final validation scores it; no validation happens before the end (no model selection, no learning-rate
decay). Skips when the files (``../shared/data/ptb-char/`` beside the repository, or
``$MINFLUX_PTB_DIR``) are absent. ``--run DIR`` keeps the run there (and reuses a finished one).

Writes ``results/hmlstm_quality.json`` and ``results/hmlstm_quality.md``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]  # this checkout's minflux, models and train
from _common import markdown_table, write_results  # noqa: E402
PTB = Path(os.environ.get("MINFLUX_PTB_DIR", ROOT.parent / "shared" / "data" / "ptb-char"))
TARGET_BPC, TARGET_FIRST_LETTER = 1.96, 0.80
SETTINGS = ["model.kind=hmlstm", "model.hidden_sizes=[256, 256]", "model.embed_size=64",
            "model.output_embed_size=256", "model.layer_norm=false", 'model.cell_form="blend"',
            'model.init="authors"', "optim.lr=0.002", "optim.clip_norm=1.0", "train.batch_size=32",
            "train.seq_len=100", "train.max_steps=600", "train.eval_every=1000000", "train.max_minutes=0",
            "train.log_every=10", "train.seed=0", 'train.device="cpu"', "sample.length=100"]


def prepare_data(folder: Path) -> None:
    """A PTB folder whose train split is the real validation file and whose valid / test are the test file."""
    folder.mkdir(parents=True, exist_ok=True)
    for split, source in [("train", "valid"), ("valid", "test"), ("test", "test")]:
        link = folder / f"ptb.char.{split}.txt"
        if not link.exists():
            link.symlink_to(PTB / f"ptb.char.{source}.txt")


def train_run(run: Path, data: Path, overrides: list[str]) -> float:
    """Train (unless ``run`` already finished); returns the wall seconds spent."""
    if (run / "metrics.jsonl").is_file() and any(
            json.loads(line)["kind"] == "end" for line in (run / "metrics.jsonl").read_text().splitlines()):
        return float("nan")
    args = ["--config", "hmlstm_ptb", "--out", str(run), "--set", f"data.path={json.dumps(str(data))}",
            "--set", f"data.cache_dir={json.dumps(str(data / 'cache'))}"]
    for setting in SETTINGS + overrides:
        args += ["--set", setting]
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "train", *args], cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"python -m train failed with status {done.returncode}")
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", default=None, help="keep (or reuse) the run in this directory")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    if not all((PTB / f"ptb.char.{s}.txt").is_file() for s in ("valid", "test")):
        print(f"skipped: no ptb.char.valid.txt / ptb.char.test.txt in {PTB}")
        return 0
    from train.boundaries import position_table, rates_over_file
    from train.runs import open_run

    with tempfile.TemporaryDirectory() as tmp:
        run = Path(args.run) if args.run else Path(tmp) / "run"
        data = Path(tmp) / "ptb"
        prepare_data(data)
        train_seconds = train_run(run, data, args.overrides)
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        end = [r for r in records if r["kind"] == "end"][-1]
        opened = open_run(run, "latest", "cpu")
        start = time.perf_counter()
        columns, rows = rates_over_file(opened.model, opened.vocab, PTB / "ptb.char.test.txt", "ptb", 32, 100,
                                        "cpu")
        position_seconds = time.perf_counter() - start
    flush_column = columns.index("layer 1: flushes on it")
    first = next(rates[flush_column] for label, _, rates in rows if label == "letter 1")
    elsewhere = [(count, rates[flush_column]) for label, count, rates in rows if label != "letter 1"]
    other = sum(c * r for c, r in elsewhere) / sum(c for c, _ in elsewhere)
    after_separator = next(rates[0] for label, _, rates in rows if label == "separator")
    train_records = [r for r in records if r["kind"] == "train"]
    result = {
        "test_bpc": end["valid_bpc"], "test_chars": end["valid_chars"], "streams": end["streams"],
        "steps": end["step"],
        "train_seconds": train_seconds if train_seconds == train_seconds else end["seconds"],
        "position_seconds": position_seconds, "layer1_first_letter_rate": first,
        "layer1_rate_after_separators": after_separator,
        "layer1_rate_elsewhere": other, "boundary_rates": end.get("boundary_rates"),
        "flush": end.get("flush"), "update": end.get("update"), "copy": end.get("copy"),
        "train_boundary_rates_every_100_steps": [r["boundary_rates"] for r in train_records
                                                 if r["step"] % 100 == 0],
        "by_position": [{"position": label, "characters": count, **dict(zip(columns, rates))}
                        for label, count, rates in rows],
        "settings": SETTINGS + args.overrides,
        "passed": end["valid_bpc"] <= TARGET_BPC and first >= TARGET_FIRST_LETTER,
    }
    f, u, c = (result[k] or [] for k in ("flush", "update", "copy"))
    summary = markdown_table(["", "minflux HM-LSTM", "target", "independent PyTorch HM-LSTM"], [
        ["test bits per character (whole test set, 32 streams)", f"{result['test_bpc']:.3f}",
         f"<= {TARGET_BPC}", "1.952"],
        ["layer 1 fires on word-first letters (flushes there: z = 1 after the character before)",
         f"{first:.1%}", f">= {TARGET_FIRST_LETTER:.0%}", "87%"],
        ["layer 1 flushes elsewhere", f"{other:.1%}", "", ""],
        ["layer 1: z = 1 after reading a separator", f"{after_separator:.1%}", "", ""],
        ["layer 1 / layer 2 FLUSH, UPDATE, COPY on the test set",
         " / ".join(f"{a:.2f}, {b:.2f}, {d:.2f}" for a, b, d in zip(f, u, c)), "", ""],
        ["training steps (batch 32 x 100)", result["steps"], "600", "600"],
        ["training time", f"{result['train_seconds'] / 60:.1f} min", "", ""],
    ])
    table = ("HM-LSTM quality on Penn Treebank characters: trained on `ptb.char.valid.txt`, scored on "
             "`ptb.char.test.txt` (`python benchmarks/hmlstm_quality.py`; 2 x 256, embedding 64, output "
             "embedding 256, batch 32, segments of 100, Adam 0.002, clipping at 1, blend cell form, the "
             "authors' initialisation, one thread):\n\n" + summary +
             "\nWhere layer 1's boundary detector fires over the whole test file, by position in the word "
             "(`python -m train.boundaries RUN --file ptb.char.test.txt`):\n\n"
             + position_table(rows, columns) + "\n")
    write_results("hmlstm_quality", result, table)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
