"""What a replay of `mf.compile` costs per recorded operation, on a step too small to hide it.

The step trains a chain of eight ``Dense(16, 16, tanh)`` layers with Adam on a 16 x 16 batch: a few
hundred operations on 16 x 16 arrays, where the arithmetic is negligible and what remains is the
cost of calling each operation. Reported per step and per recorded operation, on one thread, as the
best of several blocks of calls (CPU time of this process): the eager step, the compiled call as a
user makes it (guard walk, replay, write-backs and outputs), the generated replay alone, and the
guard walk alone.

    python benchmarks/replay_overhead.py     # writes benchmarks/results/replay_overhead.{json,md}
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("MINFLUX_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import markdown_table, write_results  # noqa: E402


def build(layers: int, width: int):
    import numpy as np

    import minflux as mf

    rng = np.random.default_rng(0)
    model = mf.nn.Chain(*[mf.nn.Dense(width, width, mf.tanh, rng=rng) for _ in range(layers)])
    state = mf.optim.setup(mf.optim.Adam(1e-3), model)
    x, y = (rng.standard_normal((width, width)).astype(np.float32) for _ in range(2))

    def step(model, state, x, y):
        loss, (grads,) = mf.withgradient(lambda m: mf.mean((m(x) - y) ** 2), model)
        mf.optim.update(state, model, grads)
        return loss

    return step, (model, state, x, y)


def best_cpu_seconds(fn, calls: int, blocks: int) -> float:
    best = float("inf")
    for _ in range(blocks):
        start = time.process_time()
        for _ in range(calls):
            fn()
        best = min(best, (time.process_time() - start) / calls)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=7)
    args = parser.parse_args(argv)

    import minflux as mf
    from minflux.compiled import guard

    step, arguments = build(args.layers, args.width)
    compiled = mf.compile(step)
    while compiled.replays < 3:
        compiled(*arguments)
    (entry,) = compiled._entries.values()
    replay, leaves = entry.replay, guard.flatten(arguments).leaves
    n = replay.n_steps
    seconds = {
        "eager step": best_cpu_seconds(lambda: step(*arguments), max(1, args.calls // 4), args.blocks),
        "compiled call": best_cpu_seconds(lambda: compiled(*arguments), args.calls, args.blocks),
        "generated replay alone": best_cpu_seconds(lambda: replay(leaves), args.calls, args.blocks),
        "guard walk alone": best_cpu_seconds(lambda: guard.flatten(arguments), args.calls, args.blocks),
    }
    rows = [[what, f"{s * 1e3:.3f}", f"{s / n * 1e6:.2f}"] for what, s in seconds.items()]
    table = (f"A chain of {args.layers} `Dense({args.width}, {args.width}, tanh)` layers trained with Adam "
             f"on a {args.width} x {args.width} batch: {n} recorded operations per step, one thread, "
             f"CPU time, best of {args.blocks} blocks of {args.calls} calls "
             "(`python benchmarks/replay_overhead.py`).\n\n"
             + markdown_table(["what", "ms per step", "us per recorded operation"], rows))
    write_results("replay_overhead", {"operations": n, "seconds": seconds, "layers": args.layers,
                                      "width": args.width}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
