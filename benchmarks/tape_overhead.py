"""Per-op overhead of the tape: a chain of small elementwise and matmul ops, forward + gradient.

Each layer computes ``h = tanh(h @ W + b) * s + h * 0.5`` (six ops); the loss is ``mean(h * h)``. The
same chain runs in minflux, in PyTorch eager (``torch.addmm`` for the affine map, as ``nn.Linear``
does, and ``torch.autograd.grad``) and in JAX (``jax.jit(jax.grad(...))``), float32. Small arrays
(16x16) measure the per-op overhead; medium arrays (256x256) show where the arithmetic takes over.
Each implementation runs in its own process per round, rounds in rotated order, on one core and on
all cores (`_own_process`), and checks its gradients against minflux's in float64 before it is
timed. The ratios are minflux time / peer time for the same work.

    python benchmarks/tape_overhead.py            # writes benchmarks/results/tape_overhead.{json,md}
    python benchmarks/tape_overhead.py --quick    # few repeats: tape_overhead_quick
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402
from _common import library_versions, markdown_table, write_results  # noqa: E402
from _own_process import (compare_options, compare_with, results_name, configure_torch, cpu_wall_table,  # noqa: E402
                          method_note, serve, setting_label, time_case)

SIZES = {16: 200, 256: 12}  # array side: repeats
LABELS = {"minflux": "minflux", "torch": "PyTorch eager", "jax": "JAX jit"}


def make_params(n: int, layers: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    params = {
        "W": [rng.standard_normal((n, n)) / np.sqrt(n) for _ in range(layers)],
        "b": [rng.standard_normal(n) * 0.1 for _ in range(layers)],
        "s": [rng.uniform(0.5, 1.0, n) for _ in range(layers)],
        "x": rng.standard_normal((n, n)),
    }
    return mf.tree.map_arrays(lambda a: a.astype(np.float32), params)


def flat(grads: dict) -> list:
    """A gradient tree's arrays in one order: W, b, s of every layer, then x."""
    return grads["W"] + grads["b"] + grads["s"] + [grads["x"]]


def minflux_chain(p):
    h = p["x"]
    for W, b, s in zip(p["W"], p["b"], p["s"]):
        h = mf.tanh(h @ W + b) * s + h * 0.5
    return mf.mean(h * h)


def count_ops(params) -> int:
    """The number of nodes the chain records on the tape."""
    from minflux.autograd import Tape, recording

    tape = Tape()
    with recording(tape):
        minflux_chain(mf.tree.map_arrays(lambda a: mf.Tensor(a, tape, tape.new_slot()), params))
    return len(tape.nodes)


def minflux_runner(params):
    return lambda: flat(mf.gradient(minflux_chain, params)[0])


def torch_runner(params):
    import torch

    p = mf.tree.map_arrays(lambda a: torch.from_numpy(a).requires_grad_(), params)
    leaves = flat(p)

    def step():
        h = p["x"]
        for W, b, s in zip(p["W"], p["b"], p["s"]):
            h = torch.tanh(torch.addmm(b, h, W)) * s + h * 0.5
        return torch.autograd.grad(torch.mean(h * h), leaves)

    return step


def jax_runner(params):
    import jax
    import jax.numpy as jnp

    p = jax.tree_util.tree_map(jnp.asarray, params)

    def chain(p):
        h = p["x"]
        for W, b, s in zip(p["W"], p["b"], p["s"]):
            h = jnp.tanh(h @ W + b) * s + h * 0.5
        return jnp.mean(h * h)

    grad = jax.jit(jax.grad(chain))
    return lambda: flat(jax.block_until_ready(grad(p)))


def reference(config) -> dict:
    """minflux's gradients of the chain in float64 (from the same float32 parameters)."""
    out = {}
    for n in config["sizes"]:
        params = mf.tree.map_arrays(lambda a: a.astype(np.float64), make_params(int(n), config["layers"]))
        out[n] = flat(mf.gradient(minflux_chain, params)[0])
    return out


def measure(setting: str, impl: str, config: dict, expected) -> dict:
    """One implementation at both array sizes, in this process."""
    if impl == "torch":
        configure_torch(setting)
    build = {"minflux": minflux_runner, "torch": torch_runner, "jax": jax_runner}[impl]
    cases = {}
    for n, repeats in config["sizes"].items():
        params = make_params(int(n), config["layers"])
        cases[n] = time_case(build(params), expected(n), repeats, rtol=2e-3, atol=2e-5, warmup=3,
                             label=f"{impl} at {n}x{n}")
        if impl == "minflux":
            cases[n]["ops"] = count_ops(params)
    return {"cases": cases}


def table(results: dict) -> str:
    """The README's tables from the results JSON: ms and us per recorded op on one core and on all
    cores, then CPU / wall of every implementation."""
    rows = []
    for setting, by_impl in results["settings"].items():
        for n in results["sizes"]:
            ms = {impl: entry["cases"][n]["seconds"] * 1e3 for impl, entry in by_impl.items()}
            ops = by_impl["minflux"]["cases"][n]["ops"]
            rows.append([setting_label(setting, results["cores"]), f"{n}x{n}", ops]
                        + [f"{ms[i]:.3g}" if i in ms else "-" for i in LABELS]
                        + [f"{ms[i] * 1e3 / ops:.1f}" if i in ms else "-" for i in ("minflux", "torch")]
                        + [f"**{ms['minflux'] / ms[i]:.2f}x**" if i in ms else "-" for i in ("torch", "jax")])
    header = (["setting", "arrays", "ops"] + [f"{label} ms" for label in LABELS.values()]
              + ["minflux us/op", "PyTorch us/op", "minflux / PyTorch", "minflux / JAX"])
    return (f"Forward + gradient of a chain of {results['layers']} layers `h = tanh(h @ W + b) * s + h * 0.5` and "
            f"`mean(h * h)`, float32, median ms (`python benchmarks/tape_overhead.py`).\n\n"
            + markdown_table(header, rows) + "\n" + cpu_wall_table(results, LABELS) + "\n"
            + method_note(results, LABELS, results["versions"]))


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return serve(sys.argv[2:], reference, measure)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=25)
    compare_options(parser, LABELS)
    args = parser.parse_args(argv)
    sizes = {str(n): max(3, repeats // 20) if args.quick else repeats for n, repeats in SIZES.items()}
    config = {"sizes": sizes, "layers": args.layers}
    results = compare_with(__file__, args, config)
    results.update(config, versions=library_versions(), dtype="float32")
    write_results(results_name("tape_overhead", args), results, table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
