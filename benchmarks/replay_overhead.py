"""What a replay of `mf.compile` costs per recorded operation, and what the recording call costs.

The first table's step trains a chain of eight ``Dense(16, 16, tanh)`` layers with Adam on a 16 x 16
batch: a few hundred operations on 16 x 16 arrays, where the arithmetic is negligible and what
remains is the cost of calling each operation. Reported per step and per recorded operation, on one
thread, as the best of several blocks of calls (CPU time of this process): the eager step, the
compiled call as a user makes it (guard walk, replay, write-backs and outputs), the replay alone in
each of its three forms (the program of per-step functions its first calls run, the straight-line
function it is compiled into once those have taken as long as compiling is expected to take, and the
native form the next replay builds), and the guard walk alone.

The second table is the HM-LSTM benchmark's step (`hmlstm_step.py`) at the small and the default
experiment's size, one thread, CPU time: the eager step (median of 5 after 3), the call that records
(after an earlier compiled step of the same size made its kernels and fusion decisions), the call
that compiles the straight-line form (after how many replays as a program), the call that probes for
native commands and builds the native form, and a native replay (median of 5 after that), with how
many operations run natively.

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


def recording_costs(size_name: str) -> dict:
    """CPU seconds of the HM-LSTM step at ``size_name``: eager, the recording call, the compiling call
    and a replay (see the module docstring)."""
    import statistics

    import hmlstm_step as hs

    from minflux.runtime import native_runner
    size = hs.SIZES[size_name]
    layer_norm = size.get("layer_norm", False)

    def cpu(fn) -> float:
        start = time.process_time()
        fn()
        return time.process_time() - start

    eager = hs.minflux_step(size, layer_norm, "auto", compiled=False)
    for _ in range(3):
        eager()
    eager_seconds = statistics.median(cpu(eager) for _ in range(5))
    hs.minflux_step(size, layer_norm, "auto", compiled=True).settle()
    step = hs.minflux_step(size, layer_norm, "auto", compiled=True)
    recording = cpu(step)
    (entry,) = step.compiled._entries.values()
    while entry.replay.compiled_after is None:
        compiling = cpu(step)
    native_runner.load_runner()
    building = cpu(step)
    replay = statistics.median(cpu(step) for _ in range(5))
    form = entry.replay.native
    return {"eager step": eager_seconds, "recording call": recording, "compiling call": compiling,
            "native build call": building, "replay": replay,
            "native operations": 0 if form is None else form.n_commands, "operations": entry.replay.n_steps,
            "replays as a program": entry.replay.compiled_after}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--sizes", nargs="*", default=["small", "default"],
                        help="HM-LSTM sizes whose recording call is measured")
    args = parser.parse_args(argv)

    import minflux as mf
    from minflux.compiled import guard
    from minflux.runtime import native_runner
    from minflux.schedule.replay import COMPILE_AFTER

    step, arguments = build(args.layers, args.width)
    compiled = mf.compile(step)
    native_runner.load_runner()
    while compiled.replays <= COMPILE_AFTER + 1:
        compiled(*arguments)
    (entry,) = compiled._entries.values()
    roots = list(arguments) + [{}, step]     # what a call walks: the arguments, keywords, the function
    replay, leaves = entry.replay, guard.flatten(roots).leaves
    n = replay.n_steps
    seconds = {
        "eager step": best_cpu_seconds(lambda: step(*arguments), max(1, args.calls // 4), args.blocks),
        "compiled call": best_cpu_seconds(lambda: compiled(*arguments), args.calls, args.blocks),
        "replay alone, native": best_cpu_seconds(lambda: replay(leaves), args.calls, args.blocks),
        "replay alone, straight-line": best_cpu_seconds(lambda: replay.straight_line(leaves), args.calls,
                                                        args.blocks),
        "replay alone, program (first calls)": best_cpu_seconds(
            lambda: replay._interpret(leaves), args.calls, args.blocks),
        "guard walk alone": best_cpu_seconds(lambda: guard.flatten(roots), args.calls, args.blocks),
    }
    rows = [[what, f"{s * 1e3:.3f}", f"{s / n * 1e6:.2f}"] for what, s in seconds.items()]
    table = (f"A chain of {args.layers} `Dense({args.width}, {args.width}, tanh)` layers trained with Adam "
             f"on a {args.width} x {args.width} batch: {n} recorded operations per step, one thread, "
             f"CPU time, best of {args.blocks} blocks of {args.calls} calls "
             "(`python benchmarks/replay_overhead.py`).\n\n"
             + markdown_table(["what", "ms per step", "us per recorded operation"], rows))
    costs = {name: recording_costs(name) for name in args.sizes}
    recording_rows = [[name, f"{c['eager step'] * 1e3:.0f}", f"{c['recording call'] * 1e3:.0f}",
                       f"{c['recording call'] / c['eager step']:.2f}x", f"{c['replays as a program']}",
                       f"{c['compiling call'] * 1e3:.0f}",
                       f"{c['native build call'] * 1e3:.0f}", f"{c['replay'] * 1e3:.0f}",
                       f"{c['native operations']} of {c['operations']}"] for name, c in costs.items()]
    table += ("\nThe HM-LSTM step (`hmlstm_step.py` sizes), one thread, CPU ms: the call that records "
              "against an eager step, the replays run as a program before the straight-line form is compiled, "
              "the call that compiles it and the one that builds the native form, against a native replay.\n\n"
              + markdown_table(["size", "eager step", "recording call", "recording / eager", "replays as a program",
                                "compiling call", "native build call", "replay", "operations run natively"],
                               recording_rows))
    write_results("replay_overhead", {"operations": n, "seconds": seconds, "layers": args.layers,
                                      "width": args.width, "recording": costs}, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
