"""The HM-LSTM cell update: forward plus the gradient of the sum w.r.t. c, f, i, g, on the CPU.

float32 ``(dims, dims)`` arrays; ``z``/``zb`` are Bernoulli(0.5) control vectors of shape ``(dims, 1)``.
Implementations:

- ``mixed (numba)``: minflux mixed mode, the default backend: one fused kernel writes the value and
  the four partials in one pass; the tape node's backward reuses them.
- ``adjoint (numba)``: the same kernel computing the partials with the element-local adjoint;
  ``auto (numba)``: the mode the compiler's cost model picks (the default of ``mf.broadcast``).
- ``mixed (numpy)``: the same transformed function on the numpy reference backend.
- ``reverse``: minflux ``mode="reverse"``: one tape node per op, branches as ``where``.
- ``hand-written numba``: a parallel numba loop computing the value and the four gradients in one
  pass with the same vectorisable float32 functions, the branch taken once per row, outputs
  allocated once per call, ``prange`` over rows: the practical limit.
- ``PyTorch eager`` (``torch.autograd.grad``) and ``JAX jit`` (``jax.jit(jax.value_and_grad(...))``,
  inputs already on the device) when importable.
- ``copy bound (same traffic)``: no arithmetic, only the memory traffic any fused kernel needs:
  five new arrays, four of them copies of c, f, i, g (``np.copyto``) and one filled (the value and
  the four gradients written, the four inputs read once). Its column gives each time over it.

Each implementation runs in its own process per round, rounds in rotated order, on one core and on
all cores (`_own_process`); each checks its gradients against a float64 numpy reference before it
is timed. Each allocates its outputs on every call (as training does). glibc returns large freed
blocks to the system and faults them in again, which costs as much as the arithmetic here;
``--malloc reuse`` keeps freed memory in the process (``mallopt``) for every implementation alike;
the default runs both. Peak memory of one gradient (tracemalloc, numpy allocations) and the first
call's seconds (compiles included, at the first size) are reported.

    python benchmarks/cell_update.py              # writes benchmarks/results/cell_update.{json,md}
    python benchmarks/cell_update.py --quick      # dims 256 and 512, few repeats: cell_update_quick
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import library_versions, markdown_table, reuse_freed_memory, traced_peak_mib, write_results  # noqa: E402
from _own_process import (RESULTS_FORMAT, compare_options, compare_with, results_name, configure_torch,  # noqa: E402
                          cpu_wall_cell, method_note, serve, setting_label, time_case, timed)

LABELS = {"mixed": "mixed (numba)", "adjoint": "adjoint (numba)", "auto": "auto (numba)",
          "mixed_numpy": "mixed (numpy)", "reverse": "reverse", "hand": "hand-written numba",
          "torch": "PyTorch eager", "jax": "JAX jit", "copy": "copy bound (same traffic)"}
SLOW = ("mixed_numpy", "reverse")
TRACED = ("mixed", "adjoint", "auto", "reverse", "hand")


def make_inputs(dims: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = (rng.random((dims, 1)) < 0.5).astype(np.float32)
    zb = (rng.random((dims, 1)) < 0.5).astype(np.float32)
    c, f, i, g = (rng.standard_normal((dims, dims)).astype(np.float32) for _ in range(4))
    return z, zb, c, f, i, g


def numpy_reference(z, zb, c, f, i, g):
    """The four gradients of the value's sum, written with numpy in float64."""
    z, zb, c, f, i, g = (a.astype(np.float64) for a in (z, zb, c, f, i, g))
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    si, sf, tg = sig(i), sig(f), np.tanh(g)
    flush, copy = z == 1, (z != 1) & (zb == 0)
    update = ~(flush | copy)
    dc = np.where(update, sf, np.where(copy, 1.0, 0.0)) + 0 * c
    df = np.where(update, c * sf * (1 - sf), 0.0)
    di = np.where(copy, 0.0, si * (1 - si) * tg) + 0 * c
    dg = np.where(copy, 0.0, si * (1 - tg * tg)) + 0 * c
    return [dc, df, di, dg]


def minflux_impl(mode: str, z, zb, *args):
    import minflux as mf

    from models.cells import cell_update

    loss = lambda c, f, i, g: mf.sum(cell_update(z, zb, c, f, i, g, mode=mode))  # noqa: E731
    return lambda: mf.withgradient(loss, *args)[1]


def hand_written(z, zb, *args):
    """A parallel numba loop: value and the four gradients of sum(value) in one pass."""
    from numba import njit, prange

    from minflux.compiler.fastmath import sigmoid_f32, tanh_f32
    one, zero = np.float32(1.0), np.float32(0.0)

    @njit(parallel=True, error_model="numpy")
    def kernel(z, zb, c, f, i, g, y, dc, df, di, dg):
        n, m = c.shape
        for r in prange(n):
            flush = z[r, 0] == one
            copy = (not flush) and zb[r, 0] == zero
            for j in range(m):
                si = sigmoid_f32(i[r, j])
                tg = tanh_f32(g[r, j])
                sf = sigmoid_f32(f[r, j])
                cc = c[r, j]
                ig = si * tg
                y[r, j] = ig if flush else (cc if copy else sf * cc + ig)
                dc[r, j] = zero if flush else (one if copy else sf)
                df[r, j] = zero if (flush or copy) else cc * sf * (one - sf)
                di[r, j] = zero if copy else si * (one - si) * tg
                dg[r, j] = zero if copy else si * (one - tg * tg)

    def run():
        outs = [np.empty_like(args[0]) for _ in range(5)]
        kernel(z, zb, *args, *outs)
        float(outs[0].sum())
        return outs[1:]

    return run


def copy_bound(c, f, i, g):
    """The kernel's memory traffic alone: read c, f, i, g once, write five new arrays."""
    outs = [np.empty_like(c) for _ in range(5)]
    for out, a in zip(outs, (c, f, i, g)):
        np.copyto(out, a)
    outs[4].fill(0.0)
    return outs


def torch_impl(z, zb, *args):
    import torch

    tz, tzb = torch.from_numpy(z), torch.from_numpy(zb)
    tc, tf, ti, tg = ts = [torch.from_numpy(a).requires_grad_() for a in args]

    def run():
        ig = torch.sigmoid(ti) * torch.tanh(tg)
        y = torch.where(tz == 1, ig, torch.where(tzb == 0, tc, torch.sigmoid(tf) * tc + ig))
        return torch.autograd.grad(y.sum(), ts)

    return run


def jax_impl(z, zb, *args):
    import jax
    import jax.numpy as jnp

    jz, jzb = jnp.asarray(z), jnp.asarray(zb)
    inputs = [jax.device_put(a) for a in args]

    def loss(c, f, i, g):
        ig = jax.nn.sigmoid(i) * jnp.tanh(g)
        y = jnp.where(jz == 1, ig, jnp.where(jzb == 0, c, jax.nn.sigmoid(f) * c + ig))
        return y.sum()

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
    return lambda: jax.block_until_ready(step(*inputs))[1]


def build(impl: str, inputs):
    if impl in ("mixed", "adjoint", "auto", "reverse"):
        return minflux_impl(impl, *inputs)
    if impl == "mixed_numpy":
        import minflux as mf

        mf.set_elementwise_backend("numpy")
        return minflux_impl("mixed", *inputs)
    return {"hand": hand_written, "torch": torch_impl, "jax": jax_impl}[impl](*inputs)


def reference(config) -> dict:
    return {str(dims): numpy_reference(*make_inputs(dims)) for dims in config["dims"]}


def measure(setting: str, impl: str, config: dict, expected) -> dict:
    """One implementation at every size, in this process."""
    if config["malloc"] == "reuse":
        reuse_freed_memory()
    if impl == "torch":
        configure_torch(setting)
    repeats = max(3, config["repeats"] // 3) if impl in SLOW else config["repeats"]
    cases = {}
    for dims in config["dims"]:
        inputs = make_inputs(dims)
        if impl == "copy":   # a bound, not an implementation: nothing to check
            copy_bound(*inputs[2:])
            cases[str(dims)] = {"samples": timed(lambda: copy_bound(*inputs[2:]), repeats)}
            continue
        run = build(impl, inputs)
        cases[str(dims)] = time_case(run, expected(str(dims)), repeats, label=f"{LABELS[impl]} at dims {dims}")
        if impl in TRACED:
            cases[str(dims)]["peak_mib"] = traced_peak_mib(run)
    return {"cases": cases}


def _over(seconds: float, base: dict | None) -> str:
    return f"{seconds / base['seconds']:.2f}x" if base else "-"


def table(results: dict) -> str:
    """The README's tables from the results JSON: per allocator setting, every implementation's
    median ms at each size on one core and on all cores, with CPU / wall."""
    dims = [str(d) for d in results["dims"]]
    first, last = dims[0], dims[-1]
    parts = ["Forward + gradient of the HM-LSTM cell update (sum of the output w.r.t. c, f, i, g), float32 "
             "`(dims, dims)`, `(dims, 1)` Bernoulli(0.5) controls, median ms (`python benchmarks/cell_update.py`).\n"]
    header = (["setting", "implementation"] + [f"dims {d}" for d in dims] +
              [f"time / hand loop at {last}", f"time / copy bound at {last}", f"first call s (dims {first})",
               "CPU / wall"])
    for malloc, res in results["malloc"].items():
        rows = []
        for setting, by_impl in res["settings"].items():
            hand, bound = (by_impl[k]["cases"][last] if k in by_impl else None for k in ("hand", "copy"))
            for impl, entry in by_impl.items():
                cases = entry["cases"]
                first_call = cases[first].get("first_call_s")
                rows.append([setting_label(setting, res["cores"]), LABELS[impl],
                             *(f"{cases[d]['seconds'] * 1e3:.2f}" for d in dims),
                             _over(cases[last]["seconds"], hand), _over(cases[last]["seconds"], bound),
                             "-" if first_call is None else f"{first_call:.2f}", cpu_wall_cell(entry, setting)])
        label = "glibc default allocator" if malloc == "default" else "freed memory kept in the process (mallopt)"
        parts += [f"**{label}**\n", markdown_table(header, rows)]
    res = next(iter(results["malloc"].values()))
    by_impl = next(iter(res["settings"].values()))
    memory = [[LABELS[impl]] + [f"{entry['cases'][d]['peak_mib']:.0f}" for d in dims]
              for impl, entry in by_impl.items() if impl in TRACED]
    parts.append(markdown_table(["peak MiB of one gradient"] + [f"dims {d}" for d in dims], memory))
    parts.append(method_note(res, LABELS, results["versions"]))
    return "\n".join(parts)


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return serve(sys.argv[2:], reference, measure)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", default="512,1024,2048")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--malloc", choices=("default", "reuse", "both"), default="both")
    compare_options(parser, LABELS)
    args = parser.parse_args(argv)
    config = {"dims": [256, 512] if args.quick else [int(d) for d in args.dims.split(",")],
              "repeats": 3 if args.quick else args.repeats}
    modes = ("default", "reuse") if args.malloc == "both" else (args.malloc,)
    results = dict(config, format=RESULTS_FORMAT, versions=library_versions(("numba", "torch", "jax")),
                   malloc={malloc: compare_with(__file__, args, dict(config, malloc=malloc)) for malloc in modes})
    write_results(results_name("cell_update", args), results, table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
