"""One HM-LSTM training step (forward, gradient, clip + Adam update): mixed vs reverse vs PyTorch eager.

Sizes: the paper's PTB model (3 x 512, embedding 128, batch 64, segment 100) and a small one (2 x 128,
batch 32, segment 50). Reports tokens per second (median over repeats) and the peak memory that
Python-side allocations reach during a step (tracemalloc sees every numpy buffer).

    python benchmarks/hmlstm_step.py [--sizes small,ptb] [--repeats 3]
"""
from __future__ import annotations

import argparse
import sys
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402
from _common import markdown_table, median_time, write_results  # noqa: E402
from models import HMLSTM  # noqa: E402

SIZES = {
    "small": dict(hidden=128, layers=2, embed=128, batch=32, length=50),
    "ptb": dict(hidden=512, layers=3, embed=128, batch=64, length=100),
}
VOCAB = 50


def batch(size, rng):
    tokens = rng.integers(0, VOCAB, size=(size["batch"], size["length"] + 1))
    return tokens[:, :-1], tokens[:, 1:]


def minflux_step(size, mode):
    rng = np.random.default_rng(0)
    model = HMLSTM(VOCAB, embed_size=size["embed"], hidden_sizes=(size["hidden"],) * size["layers"],
                   cell_form="branch", mode=mode, rng=rng)
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(0.002)), model)
    x, y = batch(size, rng)
    state = model.initial_state(size["batch"])

    def loss_fn(m):
        logits, new_state, _ = m(x, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, VOCAB)), y.reshape(-1)), new_state

    def step():
        _, (grads,) = mf.withgradient(loss_fn, model)
        mf.optim.update(opt, model, grads)

    return step


def torch_step(size):
    import torch

    from torch_hmlstm import TorchHMLSTM

    torch.manual_seed(0)
    model = TorchHMLSTM(VOCAB, size["embed"], size["hidden"], size["layers"])
    opt = torch.optim.Adam(model.parameters(), lr=0.002)
    x, y = (torch.from_numpy(a) for a in batch(size, np.random.default_rng(0)))

    def step():
        opt.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    return step


def peak_bytes(step) -> int:
    step()
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,ptb")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        import torch
        torch.set_num_threads(len(__import__("os").sched_getaffinity(0)))
        have_torch = True
    except ImportError:
        have_torch = False
    results, rows = {}, []
    for name in args.sizes.split(","):
        size = SIZES[name]
        tokens = size["batch"] * size["length"]
        entry = {}
        for mode in ("mixed", "reverse"):
            step = minflux_step(size, mode)
            seconds = median_time(step, repeats=args.repeats)
            entry[mode] = {"seconds": seconds, "tokens_per_s": tokens / seconds, "peak_bytes": peak_bytes(step)}
        if have_torch:
            seconds = median_time(torch_step(size), repeats=args.repeats)
            entry["torch_eager"] = {"seconds": seconds, "tokens_per_s": tokens / seconds}
        results[name] = {"size": size, **entry}
        for impl, r in entry.items():
            peak = f"{r['peak_bytes'] / 2**20:.0f} MiB" if "peak_bytes" in r else "n/a"
            rows.append([name, impl, f"{r['seconds'] * 1e3:.0f}", f"{r['tokens_per_s']:.0f}",
                         f"{entry['mixed']['tokens_per_s'] / r['tokens_per_s']:.2f}x", peak])
    table = markdown_table(["size", "implementation", "ms / step", "tokens / s", "mixed speed-up",
                            "peak memory"], rows)
    write_results("hmlstm_step", results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
