"""How much faster two cores could run an HM-LSTM training step's native commands: the bound that
the step's dependencies set, whatever the schedule.

Each size is a fresh process on all the machine's cores (`_own_process.run_worker`, setting
``all``). It builds the size's compiled training step (`hmlstm_step.minflux_step`: forward, BPTT,
global-norm clip, Adam, in the native form a run replays once compiled, built for the machine's
cores, so that its large products and kernels are cut into shares), lets it settle, and takes the
native form apart: every command is timed alone on this thread (best of ``--repeats``, on the step's
own arrays, a command cut into shares running them in turn, less the best time of a call that runs
none), and what it reads and writes is what the native form's planner orders commands by
(`minflux.schedule.native_groups.located`). A list schedule then runs each segment of commands (the
Python statements between segments are barriers) in program order, each command as soon as every
earlier command it shares memory with is done and a worker is free, a command cut into shares on
every worker at once at its time over the workers (`list_schedule`). It reports the commands' time
on one worker, on two workers with a cost for each wake-up of the second (0, 25, 50 and 80 us: on
the 2-core EPYC of the tables a sleeping worker starts its share 35 us late, "Threads" in
docs/runtime.md) and on any number of workers (the dependency graph's critical path).

It is a bound, not a schedule the runner could run as is: it reorders freely within a segment,
takes no time for a worker to learn that the command it waits on is done (the caller wakes 32 us
after its worker ends there), and lets shares gain their full count (two shares of a product from
2^24 multiply-adds ran 1.44-1.80x faster than one call there, `minflux.matrix_product`, not 2x).
Its two-worker schedule is greedy, so a cleverer order could beat it a little; the column of any
number of workers is the exact critical path.

    python benchmarks/parallel_bound.py [--sizes small,default,ptb] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import markdown_table, write_results  # noqa: E402
from _own_process import cores, run_worker  # noqa: E402
from hmlstm_step import SIZES, minflux_step  # noqa: E402
from products_bound import best_time  # noqa: E402

WAKES_US = (0, 25, 50, 80)
"""The wake-up costs of the second worker the two-worker schedules are given, microseconds."""
MANY_WORKERS = 64
"""Workers enough that none waits for one: the schedule is then the dependency graph's critical path."""


def list_schedule(segments: list, workers: int, wake: float = 0.0) -> float:
    """The seconds ``segments`` take on ``workers``: each segment a list of commands
    ``(seconds, shares, waits_on)`` in program order, where ``waits_on`` holds the indices of the
    earlier commands of its segment it must follow. A command starts once those are done and a
    worker is free (worker 0 first where both are free at once; another that sits idle when the
    command is ready pays ``wake``); a command of ``shares`` > 1 runs on every worker at once, in
    ``seconds / min(shares, workers)`` after the last of them is free (plus ``wake``). Segments run
    one after the other.

    >>> chain = [(1.0, 1, ()), (1.0, 1, (0,)), (1.0, 1, (1,))]
    >>> apart = [(1.0, 1, ()), (1.0, 1, ()), (2.0, 2, (0, 1))]
    >>> list_schedule([chain], 2), list_schedule([apart], 1), list_schedule([apart], 2)
    (3.0, 4.0, 2.0)
    >>> list_schedule([apart], 2, wake=0.5), list_schedule([chain, apart], 2)
    (3.0, 5.0)
    """
    total = 0.0
    for segment in segments:
        done = [0.0] * len(segment)
        free = [0.0] * workers
        for j, (seconds, shares, waits_on) in enumerate(segment):
            ready = max((done[k] for k in waits_on), default=0.0)
            if shares > 1 and workers > 1:
                start = max(ready, *free) + wake
                done[j] = start + seconds / min(shares, workers)
                free = [done[j]] * workers
                continue
            starts = [max(ready, f) + (wake if w and f <= ready else 0.0) for w, f in enumerate(free)]
            w = min(range(workers), key=starts.__getitem__)
            done[j] = free[w] = starts[w] + seconds
        total += max(done, default=0.0)
    return total


def _native_parts_seen() -> dict:
    """What the next native form built in this process plans its segments from, in the dict returned
    once it is built: each command statement's words, work and accesses (a benchmark's view into the
    runtime: the form's planning method is wrapped)."""
    from minflux.schedule import native

    seen, plan_segments = {}, native.NativeForm._segments

    def noted(self, statements, natives, refreshes, outputs, work, accesses):
        seen.update(natives=dict(natives), work=dict(work), accesses={i: accesses(i) for i in natives})
        return plan_segments(self, statements, natives, refreshes, outputs, work, accesses)

    native.NativeForm._segments = noted
    return seen


def segments_of(form, seen: dict, repeats: int) -> list:
    """The native form's segments as `list_schedule` takes them, every command timed alone."""
    from minflux.schedule.native_groups import _share

    program = form.program
    empty = best_time(program, 1, 1, 100)
    ranges = []
    for st in form.statements:
        if st.params and st.params[0] == form.segment:
            ranges.append((st.params[1], st.params[2]))
        elif st.params and st.params[0] == form.in_groups:
            words = [w for step in st.params[1] for w in (step if step[0].__class__ is tuple else (step,))]
            ranges.append((min(first for first, _ in words), max(end for _, end in words)))
    commands = sorted((first, end, i) for i, (first, end, _) in seen["natives"].items())
    segments = []
    for low, high in ranges:
        members = [(first, end, i) for first, end, i in commands if low <= first < high]
        accesses = [seen["accesses"][i] for _, _, i in members]
        segments.append([(max(best_time(program, first, end, repeats) - empty, 0.0), max(len(seen["work"][i][1]), 1),
                          tuple(k for k in range(j) if _share(accesses[k], accesses[j])))
                         for j, (first, end, i) in enumerate(members)])
    return segments


def worker(size_name: str, repeats: str) -> int:
    """One size in this process: its native form built for every core, its commands timed alone and
    scheduled (JSON)."""
    size = SIZES[size_name]
    seen = _native_parts_seen()
    step = minflux_step(size, size.get("layer_norm", False), "auto", compiled=True, steady=True)
    step.settle()
    (entry,) = step.compiled._entries.values()
    segments = segments_of(entry.replay.native, seen, int(repeats))
    result = {"commands": sum(map(len, segments)), "segments": len(segments),
              "one": list_schedule(segments, 1), "many": list_schedule(segments, MANY_WORKERS),
              "two": {str(us): list_schedule(segments, 2, us * 1e-6) for us in WAKES_US}}
    print(json.dumps(result))
    return 0


def table(results: dict) -> str:
    rows = []
    for size_name, r in results["cases"].items():
        rows.append([size_name, f"{r['commands']} ({r['segments']})", f"{r['one'] * 1e3:.1f}"]
                    + [f"{r['two'][str(us)] * 1e3:.1f} ({r['one'] / r['two'][str(us)]:.2f}x)" for us in WAKES_US]
                    + [f"{r['many'] * 1e3:.1f} ({r['one'] / r['many']:.2f}x)"])
    text = markdown_table(["size", "commands (segments)", "one worker (ms)"]
                          + [f"two workers, {us} us a wake-up (ms)" for us in WAKES_US]
                          + ["any number of workers (ms)"], rows)
    return text + (
        f"\nThe native commands of each size's compiled training step, built for {results['cores']} cores, "
        f"each timed alone (best of {results['repeats']}), scheduled over the dependencies the native "
        "form's planner keeps (`list_schedule`): a bound on what running its commands at once can give, "
        "not a schedule the runner runs.\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,default,ptb")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    names = args.sizes.split(",")
    unknown = [name for name in names if name not in SIZES]
    if unknown:
        parser.error(f"--sizes: {', '.join(map(repr, unknown))} not among {', '.join(SIZES)}")
    cases = {name: run_worker(__file__, [name, args.repeats], "all") for name in names}
    results = {"cases": cases, "cores": cores(), "repeats": args.repeats}
    write_results("parallel_bound", results, table(results))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        sys.exit(worker(*sys.argv[3:]))
    sys.exit(main())
