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
what a native step can shrink.

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
from _own_process import SETTINGS, cores, cpu_per_wall, run_worker, setting_label, timed  # noqa: E402
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
    """The seconds of the recorded products run alone (the median of each, summed) and their
    multiply-adds."""
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
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            _matmul_2d(a, b, out)
            times.append(time.perf_counter() - start)
        seconds += count * statistics.median(times)
    multiply_adds = sum(a[0] * a[1] * b[1] for a, _, b, _, _ in seen)
    return {"seconds": seconds, "multiply_adds": multiply_adds, "products": len(seen),
            "shapes": len(counts)}


def worker(setting: str, size_name: str, steps: str, repeats: str) -> int:
    """One size in this process: the step settled, its products noted, then timed (JSON)."""
    size = SIZES[size_name]
    step = minflux_step(size, size.get("layer_norm", False), "auto", compiled=True, steady=True)
    step.settle()
    step()                                   # the straight-line replay, its buffers planned
    seen = _products_of_one_replay(step)
    samples = timed(step, int(steps))
    alone = _products_alone(seen, int(repeats))
    print(json.dumps({"samples": samples, **alone}))
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
    return text + ("\nThe compiled training step (forward, BPTT, clip, Adam) of each size in its own "
                   f"process per setting, median of {results['steps']} replays; its products timed alone "
                   f"on arrays of the same shapes and layouts, median of {results['repeats']} runs each, "
                   "summed. Multiply-adds count the products a step computes (the COPY rows' skipped "
                   "columns excluded).\n")


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
