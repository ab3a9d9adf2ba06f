"""Cost against the number of differentiable inputs: f(x1..xN) = prod_k (x_k if x_k > 0.5 else -x_k).

Forward plus the gradient of ``sum(f)`` w.r.t. all N inputs, float32 ``(dims, dims)`` arrays, for
N = 1..10 and 18 (the arity benchmark of Revels et al. 2018): minflux mixed mode (duals), the
element-local adjoint, ``mode="auto"`` (the cost model's pick) and ``mode="reverse"``, a
hand-written parallel numba loop (value and N gradients in one pass, prefix/suffix products), and
PyTorch eager / JAX jit when importable. Each implementation runs in its own process per round,
rounds in rotated order, on one core and on all cores (`_own_process`), keeping its freed memory,
and checks its gradients against a float64 numpy reference before it is timed. Memory traffic grows linearly with N (N
inputs, N gradients); forward mode's arithmetic grows as N^2 but stays below the memory cost at
these sizes.

    python benchmarks/arity.py                 # writes benchmarks/results/arity.{json,md}
    python benchmarks/arity.py --quick         # N = 1, 2, 4, 8 at 256 x 256: arity_quick
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (library_versions, markdown_table, reuse_freed_memory, source_module,  # noqa: E402
                     traced_peak_mib, write_results)
from _own_process import (compare_options, compare_with, results_name, configure_torch, cpu_wall_table,  # noqa: E402
                          method_note, serve, setting_label, time_case)

LABELS = {"mixed": "mixed (numba)", "adjoint": "adjoint (numba)", "auto": "auto (numba)", "reverse": "reverse",
          "hand": "hand-written numba", "torch": "PyTorch eager", "jax": "JAX jit"}
TRACED = ("mixed", "adjoint", "auto", "hand")


def scalar_function(n: int):
    """The scalar function of n arguments, written out as source (the compiler reads source)."""
    args = ", ".join(f"x{k}" for k in range(n))
    factors = " * ".join(f"(x{k} if x{k} > 0.5 else -x{k})" for k in range(n))
    return getattr(source_module(f"arity_fn_{n}", f"def f({args}):\n    return {factors}\n"), "f")


def hand_written(xs):
    """A parallel numba loop: the value and all n gradients with prefix and suffix products."""
    n = len(xs)
    args = ", ".join(f"x{k}" for k in range(n))
    grads = ", ".join(f"g{k}" for k in range(n))
    lines = ["import numpy as np", "from numba import njit, prange", "",
             "@njit(parallel=True, error_model='numpy')",
             f"def kernel(y, {args}, {grads}):",
             "    rows, cols = y.shape",
             "    for r in prange(rows):",
             "        for j in range(cols):"]
    for k in range(n):
        lines.append(f"            v{k} = x{k}[r, j]")
        lines.append(f"            s{k} = v{k} if v{k} > np.float32(0.5) else -v{k}")
        lines.append(f"            d{k} = np.float32(1.0) if v{k} > np.float32(0.5) else np.float32(-1.0)")
    lines.append("            p0 = np.float32(1.0)")
    for k in range(1, n + 1):
        lines.append(f"            p{k} = p{k - 1} * s{k - 1}")
    lines.append(f"            q{n} = np.float32(1.0)")
    for k in range(n - 1, -1, -1):
        lines.append(f"            q{k} = q{k + 1} * s{k}")
    lines.append(f"            y[r, j] = p{n}")
    for k in range(n):
        lines.append(f"            g{k}[r, j] = p{k} * q{k + 1} * d{k}")
    kernel = source_module(f"arity_hand_{n}", "\n".join(lines) + "\n").kernel

    def run():
        y = np.empty_like(xs[0])
        gs = [np.empty_like(xs[0]) for _ in xs]
        kernel(y, *xs, *gs)
        float(y.sum())
        return gs

    return run


def minflux_impl(mode: str, xs):
    import minflux as mf

    f = scalar_function(len(xs))
    return lambda: mf.withgradient(lambda *xs: mf.sum(mf.broadcast(f, *xs, mode=mode)), *xs)[1]


def numpy_reference(xs):
    """The N gradients of the sum, in float64 numpy."""
    factors = [np.where(x > 0.5, x, -x).astype(np.float64) for x in xs]
    signs = [np.where(x > 0.5, 1.0, -1.0) for x in xs]
    return [np.prod([f for j, f in enumerate(factors) if j != k], axis=0) * s if len(xs) > 1 else s
            for k, s in enumerate(signs)]


def torch_impl(xs):
    import torch

    ts = [torch.from_numpy(x).requires_grad_() for x in xs]

    def run():
        y = torch.where(ts[0] > 0.5, ts[0], -ts[0])
        for t in ts[1:]:
            y = y * torch.where(t > 0.5, t, -t)
        return torch.autograd.grad(y.sum(), ts)

    return run


def jax_impl(xs):
    import jax
    import jax.numpy as jnp

    def loss(*xs):
        y = 1.0
        for x in xs:
            y = y * jnp.where(x > 0.5, x, -x)
        return y.sum()

    step = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(len(xs)))))
    inputs = [jax.device_put(x) for x in xs]
    return lambda: jax.block_until_ready(step(*inputs))[1]


PEERS = {"hand": hand_written, "torch": torch_impl, "jax": jax_impl}


def make_inputs(n: int, dims: int) -> list:
    rng = np.random.default_rng(n)
    return [rng.uniform(-1, 1, (dims, dims)).astype(np.float32) for _ in range(n)]


def reference(config) -> dict:
    return {str(n): numpy_reference(make_inputs(n, config["dims"])) for n in config["arities"]}


def measure(setting: str, impl: str, config: dict, expected) -> dict:
    """One implementation at every arity, in this process, which keeps its freed memory (as
    minflux's allocator does): without it glibc hands the hand loop's new arrays back to the system
    from N = 4 on, and every call faults them in again."""
    reuse_freed_memory()
    if impl == "torch":
        configure_torch(setting)
    cases = {}
    for n in config["arities"]:
        xs = make_inputs(n, config["dims"])
        run = PEERS[impl](xs) if impl in PEERS else minflux_impl(impl, xs)
        cases[str(n)] = time_case(run, expected(str(n)), config["repeats"], label=f"{LABELS[impl]} at N={n}")
        if impl in TRACED:
            cases[str(n)]["peak_mib"] = traced_peak_mib(run)
    return {"cases": cases}


def table(results: dict) -> str:
    """The README's tables from the results JSON: ms per N on one core and on all cores, ratios to
    the hand loop, then CPU / wall of every implementation."""
    rows = []
    for setting, by_impl in results["settings"].items():
        for n in map(str, results["arities"]):
            case = {impl: entry["cases"][n] for impl, entry in by_impl.items()}
            ms = {impl: c["seconds"] * 1e3 for impl, c in case.items()}
            rows.append([setting_label(setting, results["cores"]), n] + [f"{t:.2f}" for t in ms.values()]
                        + [f"{ms['mixed'] / ms['hand']:.2f}x", f"{ms['auto'] / ms['hand']:.2f}x",
                           f"{ms['auto'] / min(ms['mixed'], ms['adjoint']):.2f}x",
                           f"{case['mixed']['first_call_s']:.2f} / {case['adjoint']['first_call_s']:.2f}",
                           f"{case['auto']['peak_mib']:.0f} / {case['hand']['peak_mib']:.0f}"])
    impls = next(iter(results["settings"].values()))
    header = (["setting", "N"] + [f"{LABELS[i]} ms" for i in impls] +
              ["mixed / hand", "auto / hand", "auto / faster of mixed, adjoint", "first call s (mixed / adjoint)",
               "peak MiB (auto / hand)"])
    dims = results["dims"]
    return (f"Forward + gradient of `sum(prod_k (x_k if x_k > 0.5 else -x_k))` w.r.t. all N inputs, float32 "
            f"({dims}, {dims}), median ms, every process keeping its freed memory (`python benchmarks/arity.py`).\n\n" + markdown_table(header, rows)
            + "\n" + cpu_wall_table(results, LABELS) + "\n" + method_note(results, LABELS, results["versions"]))


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return serve(sys.argv[2:], reference, measure)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--arities", default="1,2,3,4,5,6,7,8,9,10,18")
    compare_options(parser, LABELS)
    args = parser.parse_args(argv)
    config = {"arities": [1, 2, 4, 8] if args.quick else [int(a) for a in args.arities.split(",")],
              "dims": 256 if args.quick else args.dims, "repeats": 3 if args.quick else args.repeats}
    results = compare_with(__file__, args, config)
    results.update(config, versions=library_versions(("numba", "torch", "jax")))
    write_results(results_name("arity", args), results, table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
