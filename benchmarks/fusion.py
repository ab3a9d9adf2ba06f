"""Automatic fusion of ordinary elementwise code: a chain of k ops, forward + gradient w.r.t. two inputs.

The chain mixes arithmetic, ``tanh``, ``sigmoid`` and ``where`` on a comparison, written the ordinary
way (operators and ``tanh``/``sigmoid``/``where`` calls), on float32 ``(dims, dims)`` arrays; the loss
is its sum. Implementations:

* minflux fused: the default, the chain computed as one mixed-mode kernel, compiled at the first
  call (``compile_after=1``, each process with an empty kernel cache: the first call is the cold
  compile);
* minflux unfused: ``mf.set_fusion(enabled=False)``, one tape node and one pass per op;
* one hand-written ``@mf.elementwise`` function of the same chain (the best minflux could do before);
* PyTorch eager (``torch.autograd.grad`` over ATen kernels), ``torch.compile`` (inductor, fused C++
  kernels; compiled before the first timed call) and ``jax.jit`` of ``value_and_grad`` where they
  import and compile.

Each implementation runs in its own process per round, rounds in rotated order, on one core and on
all cores (`_own_process`), and checks its gradients against minflux's unfused gradients in float64
before it is timed.

    python benchmarks/fusion.py            # writes benchmarks/results/fusion.{json,md}
    python benchmarks/fusion.py --quick    # k = 2, 4 at 256 x 256: fusion_quick
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import library_versions, markdown_table, source_module, write_results  # noqa: E402
from _own_process import (Unavailable, compare_options, compare_with, configure_torch, cpu_wall_table,  # noqa: E402
                          method_note, results_name, serve, setting_label, time_case)

LABELS = {"fused": "minflux fused", "unfused": "minflux unfused", "elementwise": "one @mf.elementwise",
          "torch": "PyTorch eager", "torch_compile": "torch.compile", "jax": "JAX jit"}
PRELUDES = {"minflux": "from minflux import tanh, sigmoid, where, sum as total",
            "torch": "from torch import tanh, sigmoid, where, sum as total",
            "jax": "from jax.numpy import tanh, where, sum as total\nfrom jax.nn import sigmoid"}
# op j of the chain, as a template over the running value h and the second input y
STEPS = ["h * y", "tanh(h)", "h + 0.5 * y", "sigmoid(h)", "where(h > 0.25, h, y * h)", "h - y * 0.125",
         "tanh(h * 1.5)", "h * h + y"]


def chain(k: int) -> list[str]:
    return [STEPS[j % len(STEPS)] for j in range(k)]


def ordinary_loss(k: int, framework: str):
    """The chain as ordinary code of ``framework`` (operators and its tanh, sigmoid, where, sum)."""
    lines = [PRELUDES[framework], "", "def loss(x, y):", "    h = x"]
    lines += [f"    h = {step}" for step in chain(k)] + ["    return total(h)"]
    return source_module(f"fusion_{framework}_{k}", "\n".join(lines) + "\n").loss


def minflux_elementwise(k: int):
    """The same chain as one hand-written scalar function (a conditional expression for where)."""
    lines = ["import minflux as mf", "from minflux import tanh, sigmoid", "", "@mf.elementwise",
             "def chained(x, y):", "    h = x"]
    for step in chain(k):
        if step.startswith("where"):
            step = "h if h > 0.25 else y * h"
        lines.append(f"    h = {step}")
    lines += ["    return h", "", "def loss(x, y):", "    return mf.sum(chained(x, y))"]
    return source_module(f"fusion_elementwise_{k}", "\n".join(lines) + "\n").loss


def minflux_run(impl: str, k: int, x, y):
    import minflux as mf

    loss = minflux_elementwise(k) if impl == "elementwise" else ordinary_loss(k, "minflux")
    settings = {"compile_after": 1} if impl == "fused" else {"enabled": False} if impl == "unfused" else {}

    def run():
        with mf.fusion(**settings):
            return mf.withgradient(loss, x, y)[1]

    return run


def torch_run(impl: str, k: int, x, y):
    import torch

    loss = ordinary_loss(k, "torch")
    if impl == "torch_compile":
        loss = torch.compile(loss)
    tx, ty = (torch.from_numpy(a).requires_grad_() for a in (x, y))

    def run():
        return torch.autograd.grad(loss(tx, ty), (tx, ty))

    if impl == "torch_compile":
        try:
            run()
        except Exception as e:  # no C++ compiler, an unsupported platform: reported, not timed
            raise Unavailable(f"torch.compile failed: {type(e).__name__}: {e}") from e
    return run


def jax_run(impl: str, k: int, x, y):
    import jax

    step = jax.jit(jax.value_and_grad(ordinary_loss(k, "jax"), argnums=(0, 1)))
    inputs = [jax.device_put(a) for a in (x, y)]
    return lambda: jax.block_until_ready(step(*inputs))[1]


BUILDERS = {"fused": minflux_run, "unfused": minflux_run, "elementwise": minflux_run, "torch": torch_run,
            "torch_compile": torch_run, "jax": jax_run}


def make_inputs(dims: int):
    rng = np.random.default_rng(0)
    return tuple(rng.uniform(-1, 1, (dims, dims)).astype(np.float32) for _ in range(2))


def reference(config) -> dict:
    """minflux's unfused gradients of every chain, in float64."""
    import minflux as mf

    x, y = (a.astype(np.float64) for a in make_inputs(config["dims"]))
    with mf.fusion(enabled=False):
        return {str(k): list(mf.gradient(ordinary_loss(k, "minflux"), x, y)) for k in config["ks"]}


def measure(setting: str, impl: str, config: dict, expected) -> dict:
    """One implementation at every chain length, in this process."""
    import minflux as mf

    measure.cache = tempfile.TemporaryDirectory(prefix="minflux-fusion-cache-")  # a cold compile in every process
    os.environ["MINFLUX_CACHE_DIR"] = measure.cache.name
    if impl.startswith("torch"):
        configure_torch(setting)
    x, y = make_inputs(config["dims"])
    cases = {}
    for k in config["ks"]:
        run = BUILDERS[impl](impl, k, x, y)
        cases[str(k)] = time_case(run, expected(str(k)), config["repeats"], label=f"{LABELS[impl]} at k={k}")
        if impl == "fused":
            mf.fusion_stats(reset=True)
            run()
            cases[str(k)]["fused_launches"] = mf.fusion_stats()["fused_launches"]
    return {"cases": cases}


def table(results: dict) -> str:
    """The README's tables from the results JSON: ms per chain length on one core and on all cores,
    then CPU / wall of every implementation."""
    rows = []
    for setting, by_impl in results["settings"].items():
        for k in map(str, results["ks"]):
            case = {impl: entry["cases"][k] for impl, entry in by_impl.items()}
            ms = {impl: c["seconds"] * 1e3 for impl, c in case.items()}
            rows.append([setting_label(setting, results["cores"]), k] + [f"{t:.2f}" for t in ms.values()]
                        + [f"{ms['fused'] / ms['elementwise']:.2f}x", f"{ms['unfused'] / ms['fused']:.2f}x",
                           f"{case['fused']['first_call_s']:.2f}"])
    impls = next(iter(results["settings"].values()))
    header = (["setting", "k"] + [f"{LABELS[i]} ms" for i in impls]
              + ["fused / @mf.elementwise", "unfused / fused", "fused cold compile s"])
    dims = results["dims"]
    return (f"Forward + gradient w.r.t. two inputs of a chain of k elementwise ops written the ordinary way "
            f"(arithmetic, tanh, sigmoid, where on a comparison), float32 ({dims}, {dims}), median ms "
            f"(`python benchmarks/fusion.py`).\n\n" + markdown_table(header, rows) + "\n"
            + cpu_wall_table(results, LABELS) + "\n" + method_note(results, LABELS, results["versions"]))


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return serve(sys.argv[2:], reference, measure)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--ks", default="2,4,8,16")
    compare_options(parser, LABELS)
    args = parser.parse_args(argv)
    config = {"ks": [2, 4] if args.quick else [int(k) for k in args.ks.split(",")],
              "dims": 256 if args.quick else args.dims, "repeats": 3 if args.quick else args.repeats}
    results = compare_with(__file__, args, config)
    results.update(config, versions=library_versions(("torch", "jax")))
    write_results(results_name("fusion", args), results, table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
