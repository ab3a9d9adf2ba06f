"""One optimiser update of HM-LSTM-sized parameters: minflux vs hand-written numpy vs PyTorch.

The parameters have the shapes of the paper's PTB HM-LSTM (3 layers x 512, embedding 128, 50
characters; about 8.4 million float32 numbers). Implementations:

- minflux ``Adam`` and ``chain(ClipNorm(1.0), Adam)`` through ``optim.update``;
- a hand-written in-place numpy Adam (the same arithmetic, no framework);
- ``torch.optim.Adam(fused=True)``, alone and after ``clip_grad_norm_(foreach=True)``, when PyTorch
  is importable.

Each implementation runs in its own process per round, rounds in rotated order, on one core and on
all cores (`_own_process`), and checks the parameters after its first update against a float64
numpy Adam step before it is timed.

    python benchmarks/optim_update.py          # writes benchmarks/results/optim_update.{json,md}
    python benchmarks/optim_update.py --quick  # small arrays, few repeats: optim_update_quick
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import library_versions, markdown_table, write_results  # noqa: E402
from _own_process import (compare_options, compare_with, results_name, configure_torch, cpu_wall_cell,  # noqa: E402
                          method_note, serve, setting_label, time_case)

LABELS = {"minflux": "minflux Adam", "minflux_clip": "minflux chain(ClipNorm, Adam)",
          "numpy": "numpy in-place Adam (hand-written)", "torch": "PyTorch Adam (fused)",
          "torch_clip": "PyTorch clip_grad_norm_ + Adam (fused)"}
LR = 1e-3


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


def make_problem(hidden: int, dtype=np.float32):
    """Parameters and gradients (float32 values, held in ``dtype``)."""
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes(hidden, 128, 50, 3)]
    grads = [(rng.standard_normal(p.shape) * 1e-2).astype(np.float32) for p in params]
    return [p.astype(dtype) for p in params], [g.astype(dtype) for g in grads]


def numpy_adam(params, grads, lr=LR, b1=0.9, b2=0.999, eps=1e-8):
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


def minflux_adam(params, grads, clip: bool):
    import minflux as mf

    rule = mf.optim.Adam(LR)
    state = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), rule) if clip else rule, params)
    return lambda: mf.optim.update(state, params, grads)


def torch_adam(params, grads, clip: bool):
    import torch

    tp = [torch.nn.Parameter(torch.from_numpy(p)) for p in params]
    for p, g in zip(tp, grads):
        p.grad = torch.from_numpy(g.copy())
    opt = torch.optim.Adam(tp, lr=LR, fused=True)

    def update():
        if clip:
            torch.nn.utils.clip_grad_norm_(tp, 1.0, foreach=True)
        opt.step()
    return update


def reference(config) -> dict:
    """The parameters after one Adam step in float64, without and with the gradients clipped to norm 1."""
    out = {}
    for case in ("plain", "clip"):
        params, grads = make_problem(config["hidden"], np.float64)
        if case == "clip":
            grads = [g * min(1.0, 1.0 / np.sqrt(sum(float(np.sum(g * g)) for g in grads))) for g in grads]
        numpy_adam(params, grads)()
        out[case] = params
    return out


def measure(setting: str, impl: str, config: dict, expected) -> dict:
    if impl.startswith("torch"):
        configure_torch(setting)
    params, grads = make_problem(config["hidden"])
    clip = impl.endswith("_clip")
    update = (numpy_adam(params, grads) if impl == "numpy" else
              (torch_adam if impl.startswith("torch") else minflux_adam)(params, grads, clip))
    return {"cases": {"update": time_case(update, expected("clip" if clip else "plain"), config["repeats"],
                                          result=lambda: params, rtol=1e-6, atol=1e-6, label=LABELS[impl])}}


def table(results: dict) -> str:
    """The README's table from the results JSON: ms per update on one core and on all cores."""
    rows = []
    for setting, by_impl in results["settings"].items():
        base = by_impl["numpy"]["cases"]["update"]["seconds"]
        for impl, entry in by_impl.items():
            seconds = entry["cases"]["update"]["seconds"]
            rows.append([setting_label(setting, results["cores"]), LABELS[impl], f"{seconds * 1e3:.1f}",
                         f"{seconds / base:.2f}", cpu_wall_cell(entry, setting)])
    return (f"One update of {results['parameters']:,} float32 parameters ({results['arrays']} arrays), median ms "
            f"(`python benchmarks/optim_update.py`).\n\n"
            + markdown_table(["setting", "update", "ms", "vs hand-written numpy", "CPU / wall"], rows) + "\n"
            + method_note(results, LABELS, results["versions"]))


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return serve(sys.argv[2:], reference, measure)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    compare_options(parser, LABELS)
    args = parser.parse_args(argv)
    config = {"hidden": 64, "repeats": 3} if args.quick else {"hidden": 512, "repeats": args.repeats}
    results = compare_with(__file__, args, config)
    params = make_problem(config["hidden"])[0]
    results.update(config, parameters=int(sum(p.size for p in params)), arrays=len(params),
                   versions=library_versions(("torch",)))
    write_results(results_name("optim_update", args), results, table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
