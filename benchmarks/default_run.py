"""Run the default experiment (``python -m train``) once and record what it reaches and how long it takes.

    python benchmarks/default_run.py [extra python -m train arguments]

Writes ``results/default_run.json`` and ``results/default_run.md`` from the run's ``metrics.jsonl``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        run = Path(tmp) / "run"
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "train", "--out", str(run), *argv], cwd=ROOT,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            print(done.stdout, done.stderr, sep="\n")
            return done.returncode
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"]
    train = [r for r in records if r["kind"] == "train"]
    end = [r for r in records if r["kind"] == "end"][-1]
    result = {
        "wall_seconds": seconds, "steps": end["step"], "final_valid_bpc": end.get("valid_bpc"),
        "best_valid_bpc": min(r["bpc"] for r in valid) if valid else None,
        "last_train_bpc": train[-1].get("bpc") if train else None,
        "boundary_rates": train[-1].get("boundary_rates") if train else None,
        "valid_boundary_rates": end.get("boundary_rates"),
        "valid_flush_update_copy": [end.get(k) for k in ("flush", "update", "copy")],
        "arguments": argv,
    }
    rows = [["wall time", f"{seconds / 60:.1f} min"], ["training steps", result["steps"]],
            ["validation bits per character (end)", f"{result['final_valid_bpc']:.3f}"],
            ["best validation bits per character", f"{result['best_valid_bpc']:.3f}"],
            ["training bits per character (last log)", f"{result['last_train_bpc']:.3f}"]]
    if result["boundary_rates"]:
        rows.append(["boundary rates, layers 1..L-1 (last training log)",
                     ", ".join(f"{r:.2f}" for r in result["boundary_rates"])])
    if result["valid_boundary_rates"]:
        rows.append(["boundary rates, layers 1..L-1 (end validation)",
                     ", ".join(f"{r:.2f}" for r in result["valid_boundary_rates"])])
        rows.append(["FLUSH / UPDATE / COPY per layer (end validation)", "; ".join(
            f"{f:.2f} / {u:.2f} / {c:.2f}" for f, u, c in zip(*result["valid_flush_update_copy"]))])
    table = "What `python -m train` reaches (`python benchmarks/default_run.py`):\n\n" + \
        markdown_table(["", "default run"], rows)
    write_results("default_run", result, table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
