"""Data-parallel HM-LSTM training steps on 1 and 2 MPI ranks: tokens per second and the allreduce.

Each configuration runs as its own ``mpiexec -n R`` job. The global batch of the size (see
`hmlstm_step.py`: small = 2 x 128, batch 32, segment 50; ptb = 3 x 512, batch 64, segment 100) is
split over the R ranks; every step is forward + gradient, `minflux.distributed.allreduce_tree` of the
gradient, clip + Adam, as in ``python -m train``. Reported: global tokens per second (median step),
the median time in the allreduce, the gradient's bytes and the bytes each rank sends per step
(``2 (R - 1) / R`` of them), and the allreduce time per MB of gradient from a separate loop of 20
allreduces of the same tree (so compute does not blur it). One thread per rank: the machine's cores
are shared, so R ranks use R cores.

    python benchmarks/data_parallel.py [--sizes small,ptb] [--ranks 1,2] [--steps 8] [--ptb-steps 3]
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


def worker(size_name: str, steps: int, out: str) -> None:
    """One rank of a measurement (run under mpiexec)."""
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

    def loss_fn(m):
        logits, new_state, _ = m(x, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, VOCAB)), y.reshape(-1)), new_state

    step_times, reduce_times = [], []
    for k in range(steps + 1):  # the first step compiles kernels: not timed
        distributed.barrier()
        began = time.perf_counter()
        _, (grads,) = mf.withgradient(loss_fn, model)
        reduced = time.perf_counter()
        grads = distributed.allreduce_tree(grads)
        done_reduce = time.perf_counter()
        mf.optim.update(opt, model, grads)
        ended = time.perf_counter()
        if k:
            step_times.append(ended - began)
            reduce_times.append(done_reduce - reduced)
    grad_bytes = sum(int(a.nbytes) for a in mf.tree.leaves(grads, trainable_only=False))
    loop = []
    for _ in range(20):
        distributed.barrier()
        began = time.perf_counter()
        distributed.allreduce_tree(grads)
        loop.append(time.perf_counter() - began)
    # the slowest rank sets the pace: take each step's maximum over ranks
    worst = distributed.allreduce_tree({"s": np.array(step_times), "r": np.array(reduce_times),
                                        "l": np.array(loop)}, op="max")
    if distributed.is_main():
        step = statistics.median(worst["s"])
        Path(out).write_text(json.dumps(dict(
            size=size_name, ranks=ranks, steps=steps, step_s=step,
            tokens_per_s=size["batch"] * size["length"] / step,
            allreduce_s=statistics.median(worst["r"]), loop_allreduce_s=statistics.median(worst["l"]),
            grad_bytes=grad_bytes, sent_bytes_per_rank=int(2 * (ranks - 1) / ranks * grad_bytes))))


def mpiexec() -> str:
    beside = Path(sys.executable).parent / "mpiexec"
    found = str(beside) if beside.is_file() else shutil.which("mpiexec")
    if found is None:
        sys.exit("needs mpiexec: pip install -e '.[mpi]'")
    return found


def measure(size: str, ranks: int, steps: int, cache: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        env = {**os.environ, "MINFLUX_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
               "MINFLUX_CACHE_DIR": cache}
        subprocess.run([mpiexec(), "-n", str(ranks), sys.executable, __file__, "--worker", size,
                        "--steps", str(steps), "--out", str(out)], env=env, check=True)
        return json.loads(out.read_text())


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
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker, args.steps, args.out)
        return 0
    from _common import markdown_table, write_results

    cache = tempfile.mkdtemp(prefix="minflux-dp-bench-")  # kernels compile once, for every job
    loads, results = [load_average()], []
    try:
        for size in args.sizes.split(","):
            for ranks in map(int, args.ranks.split(",")):
                steps = args.ptb_steps if size == "ptb" else args.steps
                results.append(measure(size, ranks, steps, cache))
                loads.append(load_average())
                print(results[-1], flush=True)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    rows = []
    for r in results:
        base = next(b for b in results if b["size"] == r["size"] and b["ranks"] == 1)
        mb = r["grad_bytes"] / 2**20
        rows.append([r["size"], r["ranks"], r["steps"], f"{r['step_s'] * 1e3:.0f}", f"{r['tokens_per_s']:.0f}",
                     f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}x",
                     "0 (one rank)" if r["ranks"] == 1 else f"{r['allreduce_s'] * 1e3:.1f}", f"{mb:.2f}", f"{r['sent_bytes_per_rank'] / 2**20:.2f}",
                     "n/a" if r["ranks"] == 1 else f"{r['loop_allreduce_s'] * 1e3 / mb:.2f}"])
    table = markdown_table(["size", "ranks", "timed steps", "ms / step", "tokens / s", "vs 1 rank",
                            "allreduce ms / step (with waiting)", "gradient MiB", "sent MiB / rank / step",
                            "allreduce ms / MiB"], rows)
    table += (f"\nOne thread per rank on a machine whose 2 cores are shared with other users' jobs "
              f"(load average {' -> '.join(loads)} over the runs), so 2 ranks compete for the cores "
              "with other work and these ratios understate a dedicated machine. The in-step allreduce "
              "time includes waiting for the slower rank; the last column is from back-to-back "
              "allreduces of the same gradient.\n")
    write_results("data_parallel", dict(results=results, load_average=loads), table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
