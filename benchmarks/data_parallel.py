"""Data-parallel HM-LSTM training steps on 1 and 2 MPI ranks: tokens per second and the allreduce.

Each configuration runs as its own ``mpiexec -n R`` job. The global batch of the size (see
`hmlstm_step.py`: small = 2 x 128, batch 32, segment 50; ptb = 3 x 512, batch 64, segment 100) is
split over the R ranks; every step is forward + gradient, `minflux.distributed.allreduce_tree` of the
gradient, clip + Adam, as in ``python -m train``: eagerly, and through `mf.compile` (timed once every
rank replays; the allreduce is then one operation of the replay). Reported: global tokens per second (median step),
the median time in the allreduce, the gradient's bytes and the bytes each rank sends per step
(``2 (R - 1) / R`` of them), and the allreduce time per MB of gradient from a separate loop of 20
allreduces of the same tree (so compute does not blur it). One thread per rank: the machine's cores
are shared, so R ranks use R cores.

    python benchmarks/data_parallel.py [--sizes small,ptb] [--forms eager,compiled] [--ranks 1,2] [--steps 8]
        [--ptb-steps 3]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

SIZES = {
    "small": dict(hidden=128, layers=2, embed=128, batch=32, length=50),
    "ptb": dict(hidden=512, layers=3, embed=128, batch=64, length=100),
}
VOCAB = 50


def worker(size_name: str, form: str, steps: int, out: str) -> None:
    """One rank of a measurement (run under mpiexec); ``form`` is ``eager`` or ``compiled``."""
    import minflux as mf
    from minflux import distributed
    from models import HMLSTM

    distributed.init()
    size, ranks, rank = SIZES[size_name], distributed.size(), distributed.rank()
    local = size["batch"] // ranks
    rng = np.random.default_rng(0)
    model = HMLSTM(VOCAB, embed_size=size["embed"], hidden_sizes=(size["hidden"],) * size["layers"], rng=rng)
    model = distributed.broadcast_tree(model)
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(0.002)), model)
    tokens = np.random.default_rng(1).integers(0, VOCAB, size=(size["batch"], size["length"] + 1))
    x, y = tokens[rank * local:(rank + 1) * local, :-1], tokens[rank * local:(rank + 1) * local, 1:]
    state = model.initial_state(local)
    reduce_times = []

    def timed_allreduce(grads):   # the eager step's allreduce, timed (a replay runs no Python there)
        began = time.perf_counter()
        grads = distributed.allreduce_tree(grads)
        reduce_times.append(time.perf_counter() - began)
        return grads

    def step(model, opt, x, y, state, allreduce):
        def loss_fn(m):
            logits, _, _ = m(x, state)
            return mf.cross_entropy(mf.reshape(logits, (-1, VOCAB)), y.reshape(-1))

        _, (grads,) = mf.withgradient(loss_fn, model)
        grads = allreduce(grads)
        mf.optim.update(opt, model, grads)
        return grads

    if form == "compiled":
        run, allreduce = mf.compile(step), distributed.allreduce_tree
        pending = 1.0
        while pending:   # until every rank replays (fusion settles in the first calls)
            run(model, opt, x, y, state, allreduce)
            pending = distributed.allreduce_tree(np.array([float(run.replays == 0)]), op="max")[0]
    else:
        run, allreduce = step, timed_allreduce
        run(model, opt, x, y, state, allreduce)   # the first step compiles kernels: not timed
    step_times = []
    reduce_times.clear()
    for _ in range(steps):
        distributed.barrier()
        began = time.perf_counter()
        grads = run(model, opt, x, y, state, allreduce)
        step_times.append(time.perf_counter() - began)
    grad_bytes = sum(int(a.nbytes) for a in mf.tree.leaves(grads, trainable_only=False))
    loop = []
    for _ in range(20):
        distributed.barrier()
        began = time.perf_counter()
        distributed.allreduce_tree(grads)
        loop.append(time.perf_counter() - began)
    # the slowest rank sets the pace: take each step's maximum over ranks
    worst = distributed.allreduce_tree({"s": np.array(step_times), "r": np.array(reduce_times or [np.nan]),
                                        "l": np.array(loop)}, op="max")
    if distributed.is_main():
        median = statistics.median(worst["s"])
        Path(out).write_text(json.dumps(dict(
            size=size_name, form=form, ranks=ranks, steps=steps, step_s=median,
            tokens_per_s=size["batch"] * size["length"] / median,
            allreduce_s=None if form == "compiled" else statistics.median(worst["r"]),
            loop_allreduce_s=statistics.median(worst["l"]),
            grad_bytes=grad_bytes, sent_bytes_per_rank=int(2 * (ranks - 1) / ranks * grad_bytes))))


def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if found is None:
        sys.exit("needs mpiexec: pip install -e '.[mpi]'")
    return found


def measure(size: str, form: str, ranks: int, steps: int, cache: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        env = {**os.environ, "MINFLUX_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MINFLUX_CACHE_DIR": cache}
        subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, __file__, "--worker", size,
                        "--form", form, "--steps", str(steps), "--out", str(out)], env=env, check=True)
        return json.loads(out.read_text())


def table(results: list, loads: list) -> str:
    """The results' Markdown table and its note."""
    from _common import markdown_table

    rows = []
    for r in results:
        base = next(b for b in results if b["size"] == r["size"] and b["form"] == r["form"] and b["ranks"] == 1)
        mb = r["grad_bytes"] / 2**20
        in_step = ("0 (one rank)" if r["ranks"] == 1 else "in the replay" if r["allreduce_s"] is None
                   else f"{r['allreduce_s'] * 1e3:.1f}")
        rows.append([r["size"], r["form"], r["ranks"], r["steps"], f"{r['step_s'] * 1e3:.0f}",
                     f"{r['tokens_per_s']:.0f}", f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x", in_step,
                     f"{mb:.2f}", f"{r['sent_bytes_per_rank'] / 2**20:.2f}",
                     "n/a" if r["ranks"] == 1 else f"{r['loop_allreduce_s'] * 1e3 / mb:.2f}"])
    text = markdown_table(["size", "step", "ranks", "timed steps", "ms / step", "tokens / s", "vs 1 rank",
                           "allreduce ms / step (with waiting)", "gradient MiB", "sent MiB / rank / step",
                           "allreduce ms / MiB"], rows)
    text += (f"\nOne thread per rank, R ranks on R of the machine's cores (load average "
             f"{' -> '.join(loads)} over the runs: anything above the ranks' own load is other work "
             "competing for the cores). The in-step allreduce time includes waiting for the slower rank; "
             "the last column is from back-to-back allreduces of the same gradient.\n")
    return text


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="small,ptb")
    parser.add_argument("--ranks", default="1,2")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--ptb-steps", type=int, default=3)
    parser.add_argument("--forms", default="eager,compiled", help="eager, compiled or both")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--form", default="eager", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.form, args.steps, args.out)
        return 0
    from _common import write_results

    cache = tempfile.mkdtemp(prefix="minflux-dp-bench-")  # kernels compile once, for every job
    loads, results = [load_average()], []
    try:
        for size in args.sizes.split(","):
            for form in args.forms.split(","):
                for ranks in map(int, args.ranks.split(",")):
                    steps = args.ptb_steps if size == "ptb" else args.steps
                    results.append(measure(size, form, ranks, steps, cache))
                    loads.append(load_average())
                    print(results[-1], flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    write_results("data_parallel", dict(results=results, load_average=loads), table(results, loads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
