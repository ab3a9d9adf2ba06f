"""Per-op overhead of the tape: a chain of small elementwise and matmul ops, forward + gradient.

Each layer computes ``h = tanh(h @ W + b) * s + h * 0.5`` (six ops); the loss is ``mean(h * h)``. The
same chain runs in minflux and, when importable, in PyTorch eager (``torch.autograd.grad``) and in JAX
op by op (``jax.grad`` without ``jit``), in one process, single-threaded, float32. Small arrays
(16x16) measure the per-op overhead; medium arrays (256x256) show where the arithmetic takes over.
Times are medians over repeats (minflux and PyTorch called in turns); the ratio is minflux time / PyTorch time for the same work.

    python benchmarks/tape_overhead.py            # writes benchmarks/results/tape_overhead.{json,md}
    python benchmarks/tape_overhead.py --quick    # a smoke run with few repeats
"""
from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before numpy loads: compare per-op cost, not thread pools

import argparse  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402
from _common import interleaved_medians, library_versions, markdown_table, median_time, write_results  # noqa: E402

SIZES = ((16, 200), (256, 12))  # (array side, repeats)


def make_params(n: int, layers: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "W": [(rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(layers)],
        "b": [(rng.standard_normal(n) * 0.1).astype(np.float32) for _ in range(layers)],
        "s": [rng.uniform(0.5, 1.0, n).astype(np.float32) for _ in range(layers)],
        "x": rng.standard_normal((n, n)).astype(np.float32),
    }


def minflux_chain(p):
    h = p["x"]
    for W, b, s in zip(p["W"], p["b"], p["s"]):
        h = mf.tanh(h @ W + b) * s + h * 0.5
    return mf.mean(h * h)


def count_ops(params) -> int:
    """The number of nodes the chain records on the tape."""
    from minflux.autograd import Tape, recording
    from minflux.tree import map_arrays

    tape = Tape()
    with recording(tape):
        minflux_chain(map_arrays(lambda a: mf.Tensor(a, tape, tape.new_slot()), params))
    return len(tape.nodes)


def minflux_runner(params):
    return lambda: mf.gradient(minflux_chain, params)[0]


def torch_runner(params):
    try:
        import torch
    except Exception:
        return None
    torch.set_num_threads(1)
    p = {k: [torch.tensor(a, requires_grad=True) for a in v] if isinstance(v, list)
         else torch.tensor(v, requires_grad=True) for k, v in params.items()}
    flat = p["W"] + p["b"] + p["s"] + [p["x"]]

    def step():
        h = p["x"]
        for W, b, s in zip(p["W"], p["b"], p["s"]):
            h = torch.tanh(h @ W + b) * s + h * 0.5
        return torch.autograd.grad(torch.mean(h * h), flat)

    return step


def jax_runner(params):
    try:
        import jax
        import jax.numpy as jnp
    except Exception:
        return None
    p = jax.tree_util.tree_map(jnp.asarray, params)

    def chain(p):
        h = p["x"]
        for W, b, s in zip(p["W"], p["b"], p["s"]):
            h = jnp.tanh(h @ W + b) * s + h * 0.5
        return jnp.mean(h * h)

    grad = jax.grad(chain)
    return lambda: jax.block_until_ready(grad(p))


def measure(size: int, repeats: int, layers: int) -> dict:
    params = make_params(size, layers)
    ops = count_ops(params)
    runners = {"minflux": minflux_runner(params), "torch": torch_runner(params), "jax": jax_runner(params)}
    torch_step = runners["torch"]
    if torch_step is not None:  # both must compute the same gradient before their speed is compared
        mine, theirs = runners["minflux"](), torch_step()
        np.testing.assert_allclose(mine["W"][0], theirs[0].numpy(), rtol=2e-3, atol=2e-5)
    paired = {name: runners[name] for name in ("minflux", "torch") if runners[name] is not None}
    seconds = interleaved_medians(paired, repeats=repeats, warmup=3)   # taken in turns
    if runners["jax"] is not None:
        seconds["jax"] = median_time(runners["jax"], repeats=max(3, repeats // 4), warmup=3)
    result = {"size": size, "layers": layers, "ops": ops, "repeats": repeats}
    for name, s in seconds.items():
        result[f"{name}_ms"] = s * 1e3
        result[f"{name}_us_per_op"] = s * 1e6 / ops
    if "torch" in seconds:
        result["ratio_to_torch"] = seconds["minflux"] / seconds["torch"]
    return result


def table(cases: list[dict]) -> str:
    def cell(case, key, fmt="{:.3g}"):
        return fmt.format(case[key]) if key in case else "-"

    rows = [[f"{c['size']}x{c['size']}", c["ops"], cell(c, "minflux_ms"), cell(c, "torch_ms"),
             cell(c, "jax_ms"), cell(c, "minflux_us_per_op", "{:.1f}"), cell(c, "torch_us_per_op", "{:.1f}"),
             cell(c, "ratio_to_torch", "**{:.2f}x**")] for c in cases]
    header = ["arrays", "ops", "minflux ms", "PyTorch eager ms", "JAX op-by-op ms", "minflux us/op",
              "PyTorch us/op", "minflux / PyTorch"]
    layers = cases[0]["layers"]
    return (f"Forward + gradient of a chain of {layers} layers `h = tanh(h @ W + b) * s + h * 0.5` and "
            "`mean(h * h)`, float32, one thread, median over repeats "
            f"(`python benchmarks/tape_overhead.py`; {library_versions()}).\n\n" + markdown_table(header, rows))


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description="Per-op tape overhead: minflux vs PyTorch eager.")
    parser.add_argument("--layers", type=int, default=25)
    parser.add_argument("--quick", action="store_true", help="few repeats (a smoke run)")
    args = parser.parse_args(argv)
    cases = []
    for size, repeats in SIZES:
        case = measure(size, max(3, repeats // 20) if args.quick else repeats, args.layers)
        cases.append(case)
        print({k: round(v, 3) if isinstance(v, float) else v for k, v in case.items()}, flush=True)
    data = {"benchmark": "tape_overhead", "threads": 1, "dtype": "float32", "cases": cases,
            "command": "python benchmarks/tape_overhead.py" + (" --quick" if args.quick else "")}
    write_results("tape_overhead", data, table(cases))
    return cases


if __name__ == "__main__":
    main()
