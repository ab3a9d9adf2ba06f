"""Each framework in its own process, in one of two thread settings.

Thread pools and allocators of two frameworks in one process disturb each other, so a comparison
runs every measurement in a fresh process of its own, in one of two settings:

* ``one``: the process is pinned to one core (CPU affinity, set before the interpreter starts) and
  every pool is told so: ``MINFLUX_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``,
  ``MKL_NUM_THREADS`` at 1, ``PJRT_NPROC=1`` for XLA (which ignores the TensorFlow-style
  ``intra_op_parallelism_threads``), ``torch.set_num_threads(1)`` in the worker. The worker records
  its CPU time over wall time; above `MAX_ONE_CORE_RATIO` the run used more than one core and is
  reported as invalid.
* ``all``: every framework at its defaults on all the machine's cores (PyTorch told the core count).

A benchmark that times several implementations over several cases uses `compare` in its main
process and `serve` in its worker: one process per implementation and round, the order rotated
each round, every implementation checked against a reference before it is timed.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = ("one", "all")
MAX_ONE_CORE_RATIO = 1.05
RESULTS_FORMAT = "own-process-1"   # what `compare` returns; the README's tables are rendered from it
WARMUP_CALLS = 6
"""Untimed calls before a case's timed ones: minflux's kernels, cut products and native steps learn in
their first calls, `TRIES` each way, whether running split pays (`minflux.runtime.split_choice`), so
timing starts once that is settled, for every implementation alike."""
_KEY = "|"                         # case|index: a reference array's name in its .npz file
_THREAD_VARIABLES = ("MINFLUX_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                     "MKL_NUM_THREADS", "PJRT_NPROC", "XLA_FLAGS")


def environment(setting: str) -> dict:
    """The environment of a worker process in ``setting`` (thread variables of the caller removed)."""
    env = {k: v for k, v in os.environ.items() if k not in _THREAD_VARIABLES}
    if setting == "one":
        env.update({name: "1" for name in _THREAD_VARIABLES[:5]}, PJRT_NPROC="1",
                   XLA_FLAGS="--xla_cpu_multi_thread_eigen=false")
    elif setting != "all":
        raise ValueError(f"setting must be one of {SETTINGS}, got {setting!r}")
    return env


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_worker(script: str, args: list, setting: str, timeout: float = 1800, env: dict | None = None) -> dict:
    """Run ``python script --worker args...`` in ``setting`` (``env`` added to its environment); the
    JSON object its last line prints."""
    core = sorted(os.sched_getaffinity(0))[-1] if hasattr(os, "sched_getaffinity") else None

    def pin():
        if setting == "one" and core is not None:
            os.sched_setaffinity(0, {core})

    done = subprocess.run([sys.executable, script, "--worker", setting, *map(str, args)],
                          env={**environment(setting), **(env or {})}, preexec_fn=pin, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"worker {args} ({setting}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def configure_torch(setting: str) -> None:
    """In a PyTorch worker, before timing: tell PyTorch its thread count."""
    import torch

    torch.set_num_threads(1 if setting == "one" else cores())


def timed(fn, steps: int) -> list:
    """``[wall_s, cpu_s]`` of each of ``steps`` calls of ``fn`` (CPU time of every thread of the process)."""
    out = []
    for _ in range(steps):
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        out.append([time.perf_counter() - wall, time.process_time() - cpu])
    return out


def cpu_per_wall(samples: list) -> float:
    """Total CPU time over total wall time of ``[wall_s, cpu_s]`` samples."""
    return sum(c for _, c in samples) / sum(w for w, _ in samples)


def summarise(runs: list) -> dict:
    """The median wall time over the ``samples`` of an implementation's processes (one dict per
    process), and CPU / wall of all of them together and of each.

    >>> s = summarise([{"samples": [[1.0, 1.0], [3.0, 3.0]]}, {"samples": [[2.0, 1.0]]}])
    >>> s["seconds"], s["cpu_per_wall"], s["cpu_per_wall_runs"]
    (2.0, 0.8333333333333334, [1.0, 0.5])
    """
    samples = [s for run in runs for s in run["samples"]]
    return {"seconds": statistics.median(w for w, _ in samples), "cpu_per_wall": cpu_per_wall(samples),
            "cpu_per_wall_runs": [cpu_per_wall(run["samples"]) for run in runs], "samples": samples}


def cpu_wall_cell(entry: dict, setting: str) -> str:
    """A table's CPU / wall cell for `summarise`'s ``entry``: marked invalid in the one-core setting
    when any process used more than `MAX_ONE_CORE_RATIO` cores.

    >>> cpu_wall_cell({"cpu_per_wall": 1.01, "cpu_per_wall_runs": [1.0, 1.08]}, "one")
    '1.01 (invalid)'
    >>> cpu_wall_cell({"cpu_per_wall": 1.93, "cpu_per_wall_runs": [1.93]}, "all")
    '1.93'
    """
    cell = f"{entry['cpu_per_wall']:.2f}"
    if setting == "one" and max(entry["cpu_per_wall_runs"]) > MAX_ONE_CORE_RATIO:
        cell += " (invalid)"
    return cell


def setting_label(setting: str, cores: int) -> str:
    """How a table names a setting.

    >>> setting_label("one", 2), setting_label("all", 2)
    ('one core', 'all cores (2)')
    """
    return "one core" if setting == "one" else f"all cores ({cores})"


def settings_note(cores: int) -> str:
    """The sentences a table gives on how the two settings were made.

    >>> settings_note(2).split(". ")[-1]
    "All cores: each framework's defaults on 2 cores (PyTorch told the count)."
    """
    return (f"One core: every process pinned to one core (affinity), MINFLUX/OPENBLAS/OMP/MKL_NUM_THREADS=1, "
            f"PJRT_NPROC=1, torch.set_num_threads(1); CPU / wall above {MAX_ONE_CORE_RATIO} marks a run invalid. "
            f"All cores: each framework's defaults on {cores} cores (PyTorch told the count).")


def alternate(script: str, impls: list, args: list, setting: str, rounds: int, env: dict | None = None) -> dict:
    """``{impl: [the JSON of each of its processes]}``: every implementation in a fresh process of its
    own per round (`run_worker` with ``[impl, *args]``), the order rotated each round so that a change
    of load falls on all alike. One whose worker answers ``{"missing": why}`` is not run again.

    >>> import pathlib, tempfile
    >>> script = pathlib.Path(tempfile.mkdtemp()) / "worker.py"
    >>> _ = script.write_text("import json, sys; print(json.dumps({'impl': sys.argv[3]}))")
    >>> alternate(str(script), ["a", "b"], [], "one", rounds=2)
    {'a': [{'impl': 'a'}, {'impl': 'a'}], 'b': [{'impl': 'b'}, {'impl': 'b'}]}
    """
    runs = {impl: [] for impl in impls}
    for r in range(rounds):
        for impl in impls[r % len(impls):] + impls[:r % len(impls)]:
            if not (runs[impl] and "missing" in runs[impl][0]):
                runs[impl].append(run_worker(script, [impl, *args], setting, env=env))
    return runs


def compare(script: str, impls: list, config: dict, settings=SETTINGS, rounds: int = 3,
            env: dict | None = None) -> dict:
    """Time the implementations of a benchmark whose worker (`serve`) measures several cases.

    The worker runs once as implementation ``"reference"`` (one core) and writes the values the
    others are checked against, then every implementation is `alternate`-d over ``rounds`` in each
    setting, each process given ``config`` (JSON). Returns ``{"format", "rounds", "cores",
    "missing": {impl: why}, "settings": {setting: {impl: entry}}}``, where ``entry`` holds CPU / wall
    of the implementation's processes (`summarise`) and ``"cases": {case: summary}``: a case's
    `summarise`, with the median ``first_call_s`` and the largest over the processes of every other
    number its worker reported (errors, peaks).

    >>> import pathlib, tempfile
    >>> script = pathlib.Path(tempfile.mkdtemp()) / "worker.py"
    >>> _ = script.write_text(
    ...     "import sys; sys.path.insert(0, %r); import _own_process as o\\n"
    ...     "def measure(setting, impl, config, expected):\\n"
    ...     "    return {'cases': {'c': o.time_case(lambda: [[2.0]], expected('c'), repeats=2)}}\\n"
    ...     "o.serve(sys.argv[2:], lambda config: {'c': [[2.0]]}, measure)" % str(pathlib.Path(__file__).parent))
    >>> out = compare(str(script), ["a"], {}, settings=["one"], rounds=2)
    >>> sorted(out["settings"]["one"]["a"]["cases"]["c"]), len(out["settings"]["one"]["a"]["cpu_per_wall_runs"])
    (['cpu_per_wall', 'cpu_per_wall_runs', 'first_call_s', 'max_error', 'samples', 'seconds'], 2)
    """
    with tempfile.TemporaryDirectory(prefix="minflux-reference-") as folder:
        args = [json.dumps(dict(config, reference=str(Path(folder) / "reference.npz")))]
        run_worker(script, ["reference", *args], "one", env=env)
        out = {"format": RESULTS_FORMAT, "rounds": rounds, "cores": cores(), "missing": {}, "settings": {}}
        for setting in settings:
            by_impl = out["settings"][setting] = {}
            for impl, runs in alternate(script, impls, args, setting, rounds, env).items():
                if "missing" in runs[0]:
                    out["missing"][impl] = runs[0]["missing"]
                    print(f"{impl}: not run ({runs[0]['missing']})", file=sys.stderr, flush=True)
                    continue
                by_impl[impl] = _combined(runs)
                print(f"{setting} {impl}: CPU / wall {by_impl[impl]['cpu_per_wall']:.2f}", file=sys.stderr,
                      flush=True)
    return out


def compare_options(parser, impls) -> None:
    """Add the options of a benchmark that runs `compare`: ``--rounds``, ``--settings``, ``--impls``
    and ``--quick`` (a smoke run: small sizes, few repeats, 2 rounds, results under ``NAME_quick``).

    >>> import argparse
    >>> parser = argparse.ArgumentParser(); compare_options(parser, ["a", "b"])
    >>> vars(parser.parse_args(["--quick"]))
    {'rounds': 3, 'settings': 'one,all', 'impls': 'a,b', 'quick': True}
    """
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--impls", default=",".join(impls), help="comma-separated; the table needs the baselines")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small sizes, few repeats, 2 rounds, "
                                                             "results written as NAME_quick")


def results_name(name: str, args) -> str:
    """The results file a benchmark writes: ``name``, or ``name_quick`` for a ``--quick`` smoke run.

    >>> import argparse
    >>> results_name("arity", argparse.Namespace(quick=True))
    'arity_quick'
    """
    return name + ("_quick" if args.quick else "")


def compare_with(script: str, args, config: dict) -> dict:
    """`compare` as the options `compare_options` added ask."""
    return compare(script, args.impls.split(","), config, args.settings.split(","), 2 if args.quick else args.rounds)


def _combined(runs: list) -> dict:
    cases = {}
    for case in runs[0]["cases"]:
        per_run = [run["cases"][case] for run in runs]
        entry = cases[case] = summarise(per_run)
        for key in per_run[0]:
            if key == "first_call_s":
                entry[key] = statistics.median(p[key] for p in per_run)
            elif key != "samples":
                entry[key] = max(p[key] for p in per_run)
    whole = summarise([{"samples": [s for case in run["cases"].values() for s in case["samples"]]} for run in runs])
    return {"cpu_per_wall": whole["cpu_per_wall"], "cpu_per_wall_runs": whole["cpu_per_wall_runs"], "cases": cases}


class Unavailable(Exception):
    """Raised by a worker for an implementation that cannot be built here: reported, not timed."""


def serve(argv: list, reference, measure) -> int:
    """The body of a worker process `compare` started; ``argv`` is ``[setting, impl, config JSON]``.

    Implementation ``"reference"`` saves ``reference(config)`` (``{case: [arrays]}``, computed in
    float64 or by minflux) for the others. Any other prints ``measure(setting, impl, config,
    expected)`` as the JSON line `compare` reads, ``expected(case)`` giving the reference's arrays;
    ``{"missing": why}`` when it raises ImportError or `Unavailable`. (Example: `compare`.)
    """
    import numpy as np

    setting, impl, config = argv[0], argv[1], json.loads(argv[2])
    if impl == "reference":
        np.savez(config["reference"], **{f"{case}{_KEY}{i}": np.asarray(a) for case, arrays in
                                         reference(config).items() for i, a in enumerate(arrays)})
        print(json.dumps({}))
        return 0
    with np.load(config["reference"]) as saved:
        def expected(case):
            found = []
            while f"{case}{_KEY}{len(found)}" in saved.files:
                found.append(saved[f"{case}{_KEY}{len(found)}"])
            return found

        try:
            out = measure(setting, impl, config, expected)
        except (ImportError, Unavailable) as e:
            out = {"missing": f"{type(e).__name__}: {e}"}
    print(json.dumps(out))
    return 0


def check_close(label: str, got, expected, rtol: float = 1e-4, atol: float = 1e-5) -> float:
    """The largest absolute difference between the arrays ``got`` and ``expected``; SystemExit naming
    ``label`` when an element is further than ``atol + rtol * |expected|``, so that nothing is timed
    that computes something else.

    >>> check_close("x", [[1.0, 2.00001]], [[1.0, 2.0]]) < 2e-5
    True
    >>> check_close("x", [[1.0, 2.1]], [[1.0, 2.0]])
    Traceback (most recent call last):
    SystemExit: x: output 0 differs from the reference by up to 0.1; not timed
    """
    import numpy as np

    if len(got) != len(expected):
        raise SystemExit(f"{label}: {len(got)} outputs, the reference has {len(expected)}; not timed")
    worst = 0.0
    for k, (g, e) in enumerate(zip(got, expected)):
        g, e = np.asarray(g, dtype=np.float64), np.asarray(e, dtype=np.float64)
        if g.shape != e.shape:
            raise SystemExit(f"{label}: output {k} has shape {g.shape}, the reference {e.shape}; not timed")
        error = float(np.max(np.abs(g - e), initial=0.0))
        if not np.allclose(g, e, rtol=rtol, atol=atol):
            raise SystemExit(f"{label}: output {k} differs from the reference by up to {error:.3g}; not timed")
        worst = max(worst, error)
    return worst


def time_case(run, expected: list, repeats: int, result=None, rtol: float = 1e-4, atol: float = 1e-5,
              label: str = "", warmup: int = WARMUP_CALLS) -> dict:
    """One case of a worker: ``run()`` once (its compiles included: ``first_call_s``), its arrays
    (``result()``'s, when given) checked against ``expected`` (`check_close`: ``max_error``), then
    ``warmup`` untimed calls and ``repeats`` timed ones (`timed`: ``samples``).

    >>> sorted(time_case(lambda: [[1.0]], [[1.0]], repeats=3))
    ['first_call_s', 'max_error', 'samples']
    """
    start = time.perf_counter()
    out = run()
    first = time.perf_counter() - start
    error = check_close(label, out if result is None else result(), expected, rtol, atol)
    for _ in range(warmup):
        run()
    return {"first_call_s": first, "max_error": error, "samples": timed(run, repeats)}


def cpu_wall_table(results: dict, labels: dict) -> str:
    """A Markdown table of `compare`'s ``results``: CPU / wall of each implementation, a row per setting.

    >>> entry = {"cpu_per_wall": 1.0, "cpu_per_wall_runs": [1.0]}
    >>> print(cpu_wall_table({"cores": 2, "settings": {"one": {"a": entry}}}, {"a": "A"}), end="")
    | CPU / wall | A |
    |---|---|
    | one core | 1.00 |
    """
    from _common import markdown_table

    impls = list(dict.fromkeys(impl for by_impl in results["settings"].values() for impl in by_impl))
    rows = [[setting_label(setting, results["cores"])] +
            [cpu_wall_cell(by_impl[i], setting) if i in by_impl else "-" for i in impls]
            for setting, by_impl in results["settings"].items()]
    return markdown_table(["CPU / wall"] + [labels.get(i, i) for i in impls], rows)


def method_note(results: dict, labels: dict, versions: str) -> str:
    """The paragraph under a `compare` table: how it was measured, and what was not run and why.

    >>> method_note({"rounds": 3, "cores": 2, "missing": {"x": "ImportError: no x"}}, {}, "x 1.0").split(". ")[0]
    'Each implementation in its own process, 3 rounds in rotated order, medians over every timed call'
    """
    text = (f"Each implementation in its own process, {results['rounds']} rounds in rotated order, medians "
            f"over every timed call. {settings_note(results['cores'])} {versions}.")
    for impl, why in results["missing"].items():
        text += f" Not run: {labels.get(impl, impl)} ({why})."
    return text + "\n"
