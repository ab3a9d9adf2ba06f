"""One optimiser update of HM-LSTM-sized parameters: minflux vs hand-written numpy vs PyTorch.

The parameters have the shapes of the paper's PTB HM-LSTM (3 layers x 512, embedding 128, 50
characters; about 8.7 million float32 numbers). Measured in one process, float32, medians:

- minflux ``Adam`` and ``chain(ClipNorm(1.0), Adam)`` through ``optim.update``;
- a hand-written in-place numpy Adam (the same arithmetic, no framework);
- ``torch.optim.Adam`` (``foreach=True``) with ``clip_grad_norm_`` when PyTorch is importable.

    python benchmarks/optim_update.py          # writes benchmarks/results/optim_update.{json,md}
    python benchmarks/optim_update.py --quick  # a smoke run with small arrays and few repeats
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402
from _common import markdown_table, median_time, write_results  # noqa: E402


def shapes(hidden: int, embed: int, vocab: int, layers: int) -> list[tuple]:
    """Recurrent, top-down and bottom-up blocks (4H + 1 rows each), biases, embedding and output."""
    width = 4 * hidden + 1
    out = [(vocab, embed), (embed, width)]
    for layer in range(layers):
        out += [(hidden, width), (width,)]
        if layer > 0:
            out.append((hidden, width))        # bottom-up from the layer below
        if layer < layers - 1:
            out.append((hidden, width))        # top-down from the layer above
    out += [(layers * hidden, layers), (hidden * layers, hidden), (hidden, vocab), (vocab,)]
    return out


def numpy_adam(params, grads, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    step = [0]

    def update():
        step[0] += 1
        c1, c2 = 1 - b1 ** step[0], 1 - b2 ** step[0]
        for p, g, m, v in zip(params, grads, ms, vs):
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p -= lr * (m / c1) / (np.sqrt(v / c2) + eps)
    return update


def torch_adam(params, grads, clip: bool):
    import torch

    tp = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    for p, g in zip(tp, grads):
        p.grad = torch.from_numpy(g.copy())
    opt = torch.optim.Adam(tp, lr=1e-3, foreach=True)

    def update():
        if clip:
            torch.nn.utils.clip_grad_norm_(tp, 1.0)
        opt.step()
    return update


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small arrays, few repeats")
    args = parser.parse_args()
    hidden, repeats = (64, 3) if args.quick else (512, 7)
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes(hidden, 128, 50, 3)]
    grads = [rng.standard_normal(p.shape).astype(np.float32) * 1e-2 for p in params]
    count = sum(p.size for p in params)

    cases = {}
    for name, rule in [("minflux Adam", mf.optim.Adam(1e-3)),
                       ("minflux chain(ClipNorm, Adam)", mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(1e-3)))]:
        model = [p.copy() for p in params]
        state = mf.optim.setup(rule, model)
        cases[name] = median_time(lambda: mf.optim.update(state, model, grads), repeats)
    cases["numpy in-place Adam (hand-written)"] = median_time(numpy_adam([p.copy() for p in params], grads),
                                                              repeats)
    try:
        cases["PyTorch Adam (foreach)"] = median_time(torch_adam(params, grads, clip=False), repeats)
        cases["PyTorch clip_grad_norm_ + Adam"] = median_time(torch_adam(params, grads, clip=True), repeats)
    except ImportError:
        pass
    base = cases["numpy in-place Adam (hand-written)"]
    rows = [[name, f"{t * 1e3:.1f}", f"{t / base:.2f}"] for name, t in cases.items()]
    table = (f"One update of {count:,} float32 parameters ({len(params)} arrays), median of {repeats}.\n\n"
             + markdown_table(["update", "ms", "vs hand-written numpy"], rows))
    write_results("optim_update" + ("_quick" if args.quick else ""),
                  {"parameters": int(count), "arrays": len(params), "repeats": repeats,
                   "seconds": cases, "elementwise": mf.elementwise.__module__}, table)


if __name__ == "__main__":
    main()
