"""Compile time of kernels and of the native runner: cold, and in a new process with a warm disk cache.

Each measurement runs in a fresh Python process with ``MINFLUX_CACHE_DIR`` pointing at a new
directory: the first process compiles (cold), the next ones load what the first cached on disk
(warm). Times are wall clock inside the process: ``import minflux``, then the first primal call and
the first gradient of a small float32 cell update (each a different kernel), a second, different
elementwise function, the gradient of the arity benchmark's function of ten inputs in mixed mode and
then in the element-local adjoint (each its own kernel; `benchmarks/arity.py`), and last the native
runner that replays compiled steps (`minflux.runtime.native_runner.load_runner`). Medians over
``--repeats`` processes.

    python benchmarks/compile_time.py      # writes benchmarks/results/compile_time.{json,md}
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, write_results  # noqa: E402

CHILD = textwrap.dedent("""
    import json, sys, time
    t0 = time.perf_counter()
    import numpy as np
    import minflux as mf
    from minflux.runtime import native_runner
    t1 = time.perf_counter()

    @mf.elementwise
    def cell_update(z, zb, c, f, i, g):
        if z == 1:
            return mf.sigmoid(i) * mf.tanh(g)
        elif zb == 0:
            return c
        return mf.sigmoid(f) * c + mf.sigmoid(i) * mf.tanh(g)

    @mf.elementwise
    def gate(x, h):
        return mf.sigmoid(x) * h

    rng = np.random.default_rng(0)
    z, zb = (rng.random((64, 1)) < 0.5).astype(np.float32), (rng.random((64, 1)) < 0.5).astype(np.float32)
    c, f, i, g = (rng.standard_normal((64, 64)).astype(np.float32) for _ in range(4))
    t2 = time.perf_counter()
    cell_update(z, zb, c, f, i, g)
    t3 = time.perf_counter()
    mf.gradient(lambda c, f, i, g: mf.sum(cell_update(z, zb, c, f, i, g)), c, f, i, g)
    t4 = time.perf_counter()
    gate(c, f)
    t5 = time.perf_counter()
    sys.path.insert(0, BENCHMARKS)
    from arity import scalar_function
    arity_10 = scalar_function(10)
    xs = [rng.uniform(-1, 1, (64, 64)).astype(np.float32) for _ in range(10)]
    arity = {}
    for mode in ("mixed", "adjoint"):
        start = time.perf_counter()
        mf.gradient(lambda *xs: mf.sum(mf.broadcast(arity_10, *xs, mode=mode)), *xs)
        arity[mode] = time.perf_counter() - start
    t6 = time.perf_counter()
    native_runner.load_runner()
    t7 = time.perf_counter()
    print(json.dumps({"import minflux": t1 - t0, "first call (primal kernel)": t3 - t2,
                      "first gradient (dual kernel)": t4 - t3, "another function": t5 - t4,
                      "arity-10 gradient, mixed": arity["mixed"], "arity-10 gradient, adjoint": arity["adjoint"],
                      "native runner": t7 - t6, "numba imported by import minflux": "numba" in sys.modules}))
""")


def run_child(cache: Path) -> dict:
    env = {**os.environ, "MINFLUX_CACHE_DIR": str(cache)}
    script = cache / "child.py"          # a file: the compiler reads the scalar functions' source
    script.write_text(f"BENCHMARKS = {str(Path(__file__).resolve().parent)!r}\n" + CHILD)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    cold, warm = [], []
    for _ in range(args.repeats):
        cache = Path(tempfile.mkdtemp(prefix="minflux-compile-"))
        cold.append(run_child(cache))
        warm.append(run_child(cache))
    keys = ["import minflux", "first call (primal kernel)", "first gradient (dual kernel)", "another function",
            "arity-10 gradient, mixed", "arity-10 gradient, adjoint", "native runner"]
    summary = {label: {k: statistics.median(r[k] for r in runs) for k in keys}
               for label, runs in (("cold cache", cold), ("warm disk cache, new process", warm))}
    rows = [[label] + [f"{summary[label][k]:.3f}" for k in keys] for label in summary]
    table = ("Seconds in a fresh process, median of "
             f"{args.repeats} (`python benchmarks/compile_time.py`): the float32 cell update's primal "
             "and gradient kernels, a second small function, the arity benchmark's function of ten inputs "
             "differentiated in mixed mode and in the adjoint, then the native runner.\n\n"
             + markdown_table(["disk cache"] + keys, rows))
    write_results("compile_time", {"summary": summary, "cold": cold, "warm": warm}, table)


if __name__ == "__main__":
    main()
