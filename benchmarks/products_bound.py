"""How far an HM-LSTM training step is from its matrix products: the step's multiply-adds, the time of
its products alone, and the step's time, for each shipped model size, on one core and on all cores.

Each size and thread setting is a fresh process (`_own_process.run_worker`). It builds the size's
compiled training step (`hmlstm_step.minflux_step`: forward, BPTT, global-norm clip, Adam, in the
native form a run replays once compiled), lets it settle, and records every 2-D product one
replay computes, from the one place they all go through (`minflux.matrix_product`: the products of
``@`` and their gradients, the row-masked products with the COPY rows' columns left out, the factored
weight gradients): shape, operand strides, dtype. Then it times ``--steps`` replays, and the same
products alone: each on fresh arrays of its shape and strides through the same function (provider,
split and threads as in the step), ``--repeats`` times; the product time is the sum over the step
of each product's median. ``step / products`` is how many times its products' time a step takes:
everything beyond them (kernels, structural operations, the optimiser, the replay's own Python) is
what a native step can shrink. The second table says where a one-core step's time goes: every command of
its native form run alone (best of ``--repeats``, on the step's own arrays, warm in cache, less the time
of a call that runs none), summed by kind; the products Python statements call and the guard's walk of
the call's arguments and free variables (both timed in the step); and the rest of the step: the other
Python statements between native segments and what the commands cost in sequence beyond alone (where the
step runs commands at once, as on more cores, the parts overlap and do not add up: the table has one
core only).

    python benchmarks/products_bound.py [--sizes small,default,ptb] [--steps 5] [--settings one,all]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import markdown_table, write_results  # noqa: E402
from _own_process import (SETTINGS, WARMUP_CALLS, cores, cpu_per_wall, run_worker, setting_label,  # noqa: E402
                          timed)
from hmlstm_step import SIZES, minflux_step  # noqa: E402


def _products_of_one_replay(step) -> list:
    """``(a shape, a strides, b shape, b strides, dtype)`` of every 2-D product of one call of ``step``,
    replayed in Python for it (a native replay runs most products without a Python call)."""
    import minflux.matrix_product as products
    from minflux.runtime import settings

    seen, original = [], products._matmul_2d

    def noting(a, b, out=None):
        seen.append((a.shape, a.strides, b.shape, b.strides, a.dtype.str))
        return original(a, b, out)

    products._matmul_2d = noting
    settings.set("native_replay", False)
    try:
        step()
    finally:
        products._matmul_2d = original
        settings.set("native_replay", True)
    return seen


def _operand(shape, strides, dtype, rng):
    """A random array of ``shape`` laid out with ``strides`` (bytes), as a recorded operand was."""
    import numpy as np

    itemsize = np.dtype(dtype).itemsize
    extent = 1 + sum((n - 1) * s // itemsize for n, s in zip(shape, strides))
    base = rng.standard_normal(extent).astype(dtype)
    return np.lib.stride_tricks.as_strided(base, shape, strides)


def _products_alone(seen: list, repeats: int) -> dict:
    """The seconds of the recorded products run alone (the median of each, summed, once a cut product's
    split choice is made) and their multiply-adds."""
    import numpy as np

    from minflux.matrix_product import _matmul_2d

    rng = np.random.default_rng(0)
    counts: dict = {}
    for signature in seen:
        counts[signature] = counts.get(signature, 0) + 1
    seconds = 0.0
    for (a_shape, a_strides, b_shape, b_strides, dtype), count in counts.items():
        a, b = _operand(a_shape, a_strides, dtype, rng), _operand(b_shape, b_strides, dtype, rng)
        out = np.empty((a_shape[0], b_shape[1]), dtype)
        for _ in range(WARMUP_CALLS):   # a cut product's first calls measure whether its shares gain at once
            _matmul_2d(a, b, out)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            _matmul_2d(a, b, out)
            times.append(time.perf_counter() - start)
        seconds += count * statistics.median(times)
    multiply_adds = sum(a[0] * a[1] * b[1] for a, _, b, _, _ in seen)
    return {"seconds": seconds, "multiply_adds": multiply_adds, "products": len(seen),
            "shapes": len(counts)}


COMMAND_KINDS = ("products", "kernels", "copies", "elementwise and sums", "numpy loops", "bookkeeping")


def _command_kind(tag: int) -> str:
    """The `COMMAND_KINDS` entry of a native runner command's tag."""
    from minflux.runtime import native_runner_ir as ir

    if tag == ir.KERNEL:
        return "kernels"
    if tag < ir.COPY:
        return "products"
    if tag == ir.COPY:
        return "copies"
    if tag >= ir.LOOP:
        return "numpy loops"
    return "bookkeeping" if ir.POWERS <= tag < ir.PREDICATE else "elementwise and sums"


def best_time(program, first: int, end: int, calls: int) -> float:
    """The best seconds of ``calls`` runs of the native commands from word ``first`` to word ``end`` of
    ``program`` (a native form's), alone on this thread."""
    from minflux.runtime import native_runner

    best = float("inf")
    for _ in range(calls):
        start = time.perf_counter()
        native_runner.run(program, first, end)
        best = min(best, time.perf_counter() - start)
        program[0] = -1   # a check that stopped the walk (the state is spent) says nothing here
    return best


def _commands_alone(form, repeats: int) -> dict:
    """Seconds and counts by `COMMAND_KINDS` of every command of the native form (a product's share
    is one), each run alone on this thread, best of ``repeats``, less the best time of a call that
    runs no command (about 2 us of Python and ctypes). Runs them again: the step's state is spent."""
    from minflux.runtime import native_runner

    program, seconds, counts = form.program, dict.fromkeys(COMMAND_KINDS, 0.0), dict.fromkeys(COMMAND_KINDS, 0)
    empty = best_time(program, 1, 1, 100)
    at = 1
    while at < len(program):
        end = at + native_runner.command_size(program, at)
        kind = _command_kind(int(program[at]))
        seconds[kind] += max(best_time(program, at, end, repeats) - empty, 0.0)
        counts[kind] += 1
        at = end
    return {"seconds": seconds, "counts": counts, "empty_call": empty}


def _timed_with_parts(step, steps: int) -> tuple[list, dict]:
    """`timed` samples of ``steps`` calls, and the seconds per call spent in the guard's walk
    (``"guard"``) and in products called from Python (``"python products"``) in them."""
    import minflux.matrix_product as products
    from minflux.compiled import guard

    spent, originals = {"guard": 0.0, "python products": 0.0}, (guard.flatten, products._matmul_2d)

    def timing(part, fn):
        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part] += time.perf_counter() - start
        return timed_call

    guard.flatten = timing("guard", guard.flatten)
    products._matmul_2d = timing("python products", products._matmul_2d)
    try:
        samples = timed(step, steps)
    finally:
        guard.flatten, products._matmul_2d = originals
    return samples, {part: seconds / steps for part, seconds in spent.items()}


def worker(setting: str, size_name: str, steps: str, repeats: str) -> int:
    """One size in this process: the step settled, its products noted, then timed, then its products
    alone, and on one core its native commands alone (JSON)."""
    size = SIZES[size_name]
    step = minflux_step(size, size.get("layer_norm", False), "auto", compiled=True, steady=True)
    step.settle()
    step.learn()
    step()                                   # the straight-line replay, its buffers planned
    seen = _products_of_one_replay(step)
    samples, parts = _timed_with_parts(step, int(steps))
    result = {"samples": samples, **_products_alone(seen, int(repeats)), "parts": parts}
    if setting == "one":
        (entry,) = step.compiled._entries.values()
        form = entry.replay.native
        native_calls = (form.segment, form.in_groups)
        result.update(commands=_commands_alone(form, int(repeats)), python_statements=sum(
            1 for st in form.statements if not (st.params and st.params[0] in native_calls)))
    print(json.dumps(result))
    return 0


def table(results: dict) -> str:
    rows = []
    for size_name, by_setting in results["cases"].items():
        for setting, r in by_setting.items():
            step_s = statistics.median(w for w, _ in r["samples"])
            rows.append([size_name, setting_label(setting, results["cores"]), f"{r['products']}",
                         f"{r['multiply_adds'] / 1e9:.2f}", f"{r['seconds'] * 1e3:.0f}",
                         f"{2 * r['multiply_adds'] / r['seconds'] / 1e9:.0f}", f"{step_s * 1e3:.0f}",
                         f"{step_s / r['seconds']:.2f}x", f"{cpu_per_wall(r['samples']):.2f}"])
    text = markdown_table(["size", "setting", "products / step", "G multiply-adds / step",
                           "products alone (ms)", "their GFLOP/s", "step (ms)", "step / products",
                           "CPU / wall (step)"], rows)
    text += ("\nThe compiled training step (forward, BPTT, clip, Adam) of each size in its own "
             f"process per setting, median of {results['steps']} replays; its products timed alone "
             f"on arrays of the same shapes and layouts, median of {results['repeats']} runs each, "
             "summed. Multiply-adds count the products a step computes (the COPY rows' skipped "
             "columns excluded).\n")
    parts = parts_table(results)
    return text + ("\n" + parts if parts else "")


def parts_table(results: dict) -> str:
    """Where a one-core step's time goes: its native commands alone by kind, the products Python
    calls, the guard, and the rest (ms); empty without one-core runs."""
    rows = []
    for size_name, by_setting in results["cases"].items():
        for setting, r in by_setting.items():
            if "commands" not in r:   # timed on one core only: on more, parts run at once
                continue
            step_s = statistics.median(w for w, _ in r["samples"])
            parts = [r["commands"]["seconds"][kind] for kind in COMMAND_KINDS]
            rest = step_s - sum(parts) - sum(r["parts"].values())
            counts = r["commands"]["counts"]
            rows.append([size_name, setting_label(setting, results["cores"]), f"{step_s * 1e3:.1f}"]
                        + [f"{t * 1e3:.1f} ({counts[kind]})" for t, kind in zip(parts, COMMAND_KINDS)]
                        + [f"{r['parts'][part] * 1e3:.1f}" for part in ("python products", "guard")]
                        + [f"{r['python_statements']}", f"{rest * 1e3:.1f}"])
    if not rows:
        return ""
    header = (["size", "setting", "step (ms)"] + [f"{kind} (commands)" for kind in COMMAND_KINDS]
              + ["products called from Python", "guard", "Python statements", "the rest"])
    return markdown_table(header, rows) + (
        "\nThe step's native commands, each run alone on one thread on the step's own arrays (best of "
        f"{results['repeats']}, less the best time of a call that runs none), summed by kind (ms, and how "
        "many: a product's share is one); bookkeeping is "
        "Adam's bias corrections and the row-masked product's count and zeroed rows. Timed in the step: the "
        "products that Python statements call (a row-masked product that leaves rows out, a product the "
        "native form could not run), and the guard, the walk of the call's arguments and free variables "
        "that keys its recording. The rest is the step less all of these: the replay's other Python "
        "statements between native segments (how many statements in all) and what the commands cost in "
        "sequence beyond alone.\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,default,ptb")
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cases: dict = {}
    for size_name in args.sizes.split(","):
        if size_name not in SIZES:
            parser.error(f"--sizes: {size_name!r} is not one of {', '.join(SIZES)}")
        for setting in args.settings.split(","):
            print(f"{size_name}, {setting}...", file=sys.stderr)
            cases.setdefault(size_name, {})[setting] = run_worker(
                __file__, [size_name, args.steps, args.repeats], setting)
    results = {"cases": cases, "cores": cores(), "steps": args.steps, "repeats": args.repeats}
    write_results("products_bound", results, table(results))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        sys.exit(worker(*sys.argv[2:]))
    sys.exit(main())
