"""Run the default experiment (``python -m train``) once and record what it reaches and how long it takes.

    python benchmarks/default_run.py [extra python -m train arguments]

Writes ``results/default_run.json`` and ``results/default_run.md`` from the run's ``metrics.jsonl``.
The default experiment stops at a step limit, so the steps and numbers it reaches do not depend on
the machine's load; the wall time does, so the load average (before and after) and the CPU time
the run used are recorded beside it.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_results  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STOPPED = {"max_steps": "step limit (train.max_steps)", "epochs": "epochs (train.epochs)",
           "time": "time budget (train.max_minutes)", "interrupted": "interrupted"}


def main(argv: list[str]) -> int:
    load_before = os.getloadavg()
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
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_after = os.getloadavg()
    valid = [r for r in records if r["kind"] == "valid"]
    train = [r for r in records if r["kind"] == "train"]
    end = [r for r in records if r["kind"] == "end"][-1]
    result = {
        "wall_seconds": seconds, "cpu_seconds": children.ru_utime + children.ru_stime,
        "training_seconds": end.get("seconds"), "stopped": end["stopped"], "steps": end["step"],
        "final_valid_bpc": end.get("valid_bpc"),
        "best_valid_bpc": min(r["bpc"] for r in valid) if valid else None,
        "last_train_bpc": train[-1].get("bpc") if train else None,
        "boundary_rates": train[-1].get("boundary_rates") if train else None,
        "valid_boundary_rates": end.get("boundary_rates"),
        "valid_flush_update_copy": [end.get(k) for k in ("flush", "update", "copy")],
        "load_average_before": load_before[0], "load_average_after": load_after[0],
        "threads": os.environ.get("MINFLUX_NUM_THREADS", "default (all cores)"),
        "arguments": argv, "summary": done.stdout.strip().splitlines()[:4],
    }
    rows = [["training steps", f"{result['steps']:,}"],
            ["stopped by", STOPPED.get(result["stopped"], result["stopped"])],
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
    rows += [["wall time", f"{seconds / 60:.1f} min"],
             ["CPU time", f"{result['cpu_seconds'] / 60:.1f} min"],
             ["load average (1 min) before / after", f"{load_before[0]:.1f} / {load_after[0]:.1f}"]]
    arguments = f" {' '.join(argv)}" if argv else ""
    table = (f"What `python -m train{arguments}` reaches (`python benchmarks/default_run.py`); the steps and "
             "bits per character do not depend on the machine's load, the times do:\n\n"
             + markdown_table(["", "default run"], rows))
    write_results("default_run", result, table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
