"""Checks of `minflux.distributed` that need several ranks: ``mpiexec -n 2 python mpi_checks.py CHECK OUT``.

Every rank computes with its own inputs; rank 0 gathers what each rank got and pickles it to
``OUT`` for the test to compare against formulas that do not use the code under test. Only a program:
importing this file changes nothing.
"""
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np


def inputs(rank: int) -> dict:
    """What rank ``rank`` contributes (the test rebuilds the same arrays to form the expected mean)."""
    rng = np.random.default_rng(100 + rank)
    w = rng.standard_normal((7, 5)).astype(np.float32)
    return {"W": w, "tied": w, "b": rng.standard_normal(3).astype(np.float32), "none": None,
            "d": rng.standard_normal(4), "s": np.array(rng.standard_normal(), np.float32),
            "config": "static"}


def check_reduce(d, comm):
    tree = inputs(d.rank())
    small = d.allreduce_tree(tree, bucket_bytes=20)     # many buckets, each padded to the ranks
    default = d.allreduce_tree(tree)
    again = d.allreduce_tree(tree)
    counts = d.allreduce_tree({"n": np.arange(5) * (d.rank() + 1)}, op="sum")
    largest = d.allreduce_tree({"x": np.array([d.rank(), -d.rank()], np.float32)}, op="max")
    return dict(small=small, default=default, again=again, counts=counts, largest=largest,
                tied=small["tied"] is small["W"],
                inputs_kept=all(np.array_equal(tree[k], v) for k, v in inputs(d.rank()).items()
                                if isinstance(v, np.ndarray)))


def check_broadcast(d, comm):
    mine = {"p": np.full(3, float(d.rank())), "q": [np.arange(2, dtype=np.int64) + d.rank()]}
    got = d.broadcast_tree(mine)
    wrong = {"p": np.zeros(3 + d.rank())}
    try:
        d.broadcast_tree(wrong)
        error = None
    except ValueError as e:
        error = str(e)
    return dict(got=got, error=error)


def check_gather(d, comm):
    state = [{"h": np.full((2, 3), float(d.rank())), "c": np.arange(2.0)[:, None] + 10 * d.rank()}]
    return dict(gathered=d.gather_rows(state))


def check_threads(d, comm):
    import minflux as mf

    return dict(threads=mf.get_num_threads())


def check_nccl(d, comm):
    from fake_device import install_fake_cupy

    fake = install_fake_cupy()
    tree = inputs(d.rank())
    on_device = {k: (fake.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in tree.items()}
    on_device["tied"] = on_device["W"]
    reduced = d.allreduce_tree(on_device, bucket_bytes=20)
    on_host = d.allreduce_tree(tree, bucket_bytes=20)
    started = {"p": fake.asarray(np.full(3, float(d.rank()), np.float32))}
    broadcast = d.broadcast_tree(started)
    return dict(types={k: type(v).__name__ for k, v in reduced.items()},
                reduced={k: (np.asarray(v) if hasattr(v, "shape") else v) for k, v in reduced.items()},
                on_host=on_host, calls=list(fake.cuda.nccl.calls), uids=fake.cuda.nccl.uids_seen,
                broadcast=np.asarray(broadcast["p"]), tied=reduced["tied"] is reduced["W"])


def check_compiled_step(d, comm):
    """A data-parallel training step (gradient, loss and gradients averaged over the ranks, clip,
    Adam) through `mf.compile` and run eagerly, 72 calls each on this rank's own batches."""
    import minflux as mf

    def step(model, opt_state, x, y):
        loss, (grads,) = mf.withgradient(lambda m: mf.mean((m(x) - y) ** 2), model)
        loss, grads = d.allreduce_tree((loss[None], grads))   # an array: a numpy scalar is configuration
        mf.optim.update(opt_state, model, grads)
        return loss[0]

    data = np.random.default_rng(10 + d.rank())
    batches = [(data.standard_normal((4, 5)).astype(np.float32), data.standard_normal((4, 3)).astype(np.float32))
               for _ in range(72)]
    compiled = mf.compile(step)
    runs = {}
    for name, fn in (("compiled", compiled), ("eager", step)):
        rng = np.random.default_rng(0)    # the same parameters on every rank
        model = mf.nn.Chain(mf.nn.Dense(5, 8, mf.tanh, rng=rng), mf.nn.Dense(8, 3, rng=rng))
        opt_state = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(0.5, throw=False), mf.optim.Adam(0.01)),
                                   model)
        losses = [np.array(fn(model, opt_state, x, y)) for x, y in batches]
        runs[name] = dict(losses=losses, leaves=[np.array(a) for a in
                                                 mf.tree.leaves((model, opt_state), trainable_only=False)])
    return dict(runs=runs, replays=compiled.replays, recordings=compiled.recordings)


def check_watchdog(d, comm):
    if d.rank() == 1:
        time.sleep(40)  # far longer than the timeout: rank 0 must not wait for it
        Path(sys.argv[2]).with_suffix(".woke").write_text("rank 1 finished sleeping")
    d.barrier()
    return dict(finished=True)


if __name__ == "__main__":
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parents[1])]
    from mpi4py import MPI

    from minflux import distributed

    check, out = sys.argv[1], sys.argv[2]
    distributed.init(timeout=float(os.environ.get("CHECK_TIMEOUT", "60")))
    result = globals()[f"check_{check}"](distributed, MPI.COMM_WORLD)
    results = MPI.COMM_WORLD.gather(result, root=0)
    if distributed.is_main():
        Path(out).write_bytes(pickle.dumps(dict(size=distributed.size(), ranks=results)))
