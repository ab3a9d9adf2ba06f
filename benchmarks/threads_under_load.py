"""CPU time and wall time per step at the default thread budget against one thread, on an idle and
on a busy machine (busy loops in the background).

A thread budget is only a good default if it never costs more than one thread: a pool that spins
while it waits takes a core from whatever else runs, and on a busy machine that turns into a many
times slower step. For each load (0, 2 and 4 busy loops) and each budget (the default, the cores
this process may use; and ``MINFLUX_NUM_THREADS=1``) this records, each in a fresh process:

* the HM-LSTM training step of the default experiment's model and of the small model
  (``hmlstm_step.py``'s worker), eager and through `mf.compile` in its native form, settled (what
  ``python -m train`` runs): CPU seconds and wall seconds per step, median of ``--steps``;
* ``python -m train`` for ``--train-steps`` steps of the default experiment: the whole process's
  CPU and wall time (imports, kernel loading and the final evaluation included);
* ``python -m train.evaluate RUN --split valid`` on that run: the whole process's CPU and wall time.

    python benchmarks/threads_under_load.py [--loads 0,2,4] [--steps 5] [--train-steps 30] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import markdown_table, write_results  # noqa: E402
from _own_process import cores, environment  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STEP = str(Path(__file__).resolve().parent / "hmlstm_step.py")
BUDGETS = {"default": None, "one thread": "1"}


def _env(budget: str | None) -> dict:
    env = environment("all")
    if budget is not None:
        env["MINFLUX_NUM_THREADS"] = budget
    return env


def _process(argv: list, env: dict) -> tuple[float, float, str]:
    """Run ``argv``: its CPU seconds (every thread it ran), wall seconds and standard output."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out, err = proc.stdout.read(), proc.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))} failed:\n{err[-3000:]}")
    return usage.ru_utime + usage.ru_stime, wall, out


def step_costs(size: str, budget: str | None, steps: int, impl: str) -> dict:
    *_, out = _process([sys.executable, STEP, "--worker", "all", impl, size,
                        "on" if size == "default" else "off", str(steps)], _env(budget))
    samples = json.loads(out.strip().splitlines()[-1])["samples"]
    return {"cpu_s": statistics.median(c for _, c in samples), "wall_s": statistics.median(w for w, _ in samples)}


def busy_loops(n: int) -> list:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def measure(load: int, steps: int, train_steps: int, tmp: Path, round_: int = 0) -> dict:
    """Round ``round_`` at ``load`` busy loops: every budget in turn (in reverse order in odd rounds)."""
    loops = busy_loops(load)
    try:
        time.sleep(1.0 if load else 0.0)
        out = {}
        for name, budget in (reversed if round_ % 2 else iter)(list(BUDGETS.items())):
            run = tmp / f"run-{load}-{round_}-{name.replace(' ', '-')}"
            tmp.mkdir(exist_ok=True)
            cpu, wall, _ = _process([sys.executable, "-m", "train", "--out", str(run), "--quiet",
                                  "--set", f"train.max_steps={train_steps}"], _env(budget))
            train = {"cpu_s": cpu, "wall_s": wall}
            cpu, wall, _ = _process([sys.executable, "-m", "train.evaluate", str(run), "--split", "valid",
                                  "--checkpoint", "latest"], _env(budget))
            out[name] = {f"{size}_{impl}": step_costs(size, budget, steps, impl)
                         for size in ("default", "small") for impl in ("auto", "native")}
            out[name].update(train=train, evaluate={"cpu_s": cpu, "wall_s": wall})
            print(f"load {load}, {name}: {json.dumps(out[name])}", file=sys.stderr, flush=True)
        return out
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def median_of_rounds(rounds: list) -> dict:
    """Each budget's CPU and wall seconds of each measurement: the median over the rounds."""
    return {budget: {what: {k: statistics.median(r[budget][what][k] for r in rounds) for k in ("cpu_s", "wall_s")}
                     for what in rounds[0][budget]}
            for budget in BUDGETS}


def table(results: dict, steps: int, train_steps: int) -> str:
    rows = []
    for load, by_budget in results["loads"].items():
        for what, label in (("default_auto", "eager step, default model"), ("small_auto", "eager step, small model"),
                            ("default_native", "compiled step (native), default model"),
                            ("small_native", "compiled step (native), small model"),
                            ("train", f"python -m train, {train_steps} steps"),
                            ("evaluate", "python -m train.evaluate, valid split")):
            d, one = by_budget["default"][what], by_budget["one thread"][what]
            rows.append([load, label, f"{d['cpu_s']:.2f}", f"{one['cpu_s']:.2f}", f"{d['cpu_s'] / one['cpu_s']:.2f}",
                         f"{d['wall_s']:.2f}", f"{one['wall_s']:.2f}", f"{one['wall_s'] / d['wall_s']:.2f}x"])
    text = markdown_table(["busy loops", "what", "CPU s (default)", "CPU s (1 thread)", "CPU ratio",
                           "wall s (default)", "wall s (1 thread)", "default's speed-up"], rows)
    text += (f"\nDefault: MINFLUX_NUM_THREADS unset ({results['cores']} cores); steps: median of {steps} per "
             "process after the first; python -m train and train.evaluate: the whole process (imports and "
             "kernel loading included). Every cell is the median of "
             f"{results['rounds']} rounds, the two budgets in alternating order, each in its own "
             "process. Busy loops: `while True: pass` processes started before the measurement.\n")
    return text


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default="0,2,4")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    results = {"cores": cores(), "rounds": args.rounds, "loads": {}}
    with tempfile.TemporaryDirectory() as tmp:
        measure(0, 1, 1, Path(tmp) / "warm-up")   # compiles every kernel into the disk cache, untimed
        for load in map(int, args.loads.split(",")):
            rounds = [measure(load, args.steps, args.train_steps, Path(tmp), r) for r in range(args.rounds)]
            results["loads"][str(load)] = median_of_rounds(rounds)
    write_results("threads_under_load", results, table(results, args.steps, args.train_steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
