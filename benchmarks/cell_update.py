"""The HM-LSTM cell update: forward plus the gradient of the sum w.r.t. c, f, i, g, on the CPU.

float32 ``(dims, dims)`` arrays; ``z``/``zb`` are Bernoulli(0.5) control vectors of shape ``(dims, 1)``.
Compared side by side in one process (medians over repeats; the minflux numba modes, the hand loop
and the copy bound are called in turns, one of each per round; all threads of the machine unless
MINFLUX_NUM_THREADS/NUMBA_NUM_THREADS say less):

- ``mixed (numba)``: minflux mixed mode, the default backend: one fused kernel writes the value and
  the four partials in one pass; the tape node's backward reuses them.
- ``adjoint (numba)``: the same kernel computing the partials with the element-local adjoint;
  ``auto (numba)``: the mode the compiler's cost model picks (the default of ``mf.broadcast``).
- ``mixed (numpy)``: the same transformed function on the numpy reference backend.
- ``reverse``: minflux ``mode="reverse"``: one tape node per op, branches as ``where``.
- ``hand-written numba``: a parallel numba loop computing the value and the four gradients in one
  pass with the same vectorisable float32 functions, the branch taken once per row, outputs
  allocated once per call, ``prange`` over rows: the practical limit. It is checked against a
  float64 numpy reference before anything is timed.
- ``PyTorch eager`` and ``JAX jit`` (``jax.jit(jax.value_and_grad(...))``) when importable.
- ``copy bound (same traffic)``: no arithmetic, only the memory traffic any fused kernel needs:
  five new arrays, four of them copies of c, f, i, g (``np.copyto``) and one filled (the value and
  the four gradients written, the four inputs read once). The last column is each time over it.

Each implementation allocates its outputs on every call (as training does). glibc returns large
freed blocks to the system and faults them in again, which costs as much as the arithmetic here;
``--malloc reuse`` keeps freed memory in the process (``mallopt``) for every implementation alike;
the default runs both settings, each in its own process. Peak memory of one gradient (tracemalloc,
numpy allocations) and the first call's seconds (compile included, at the first size) are reported.

    python benchmarks/cell_update.py              # writes benchmarks/results/cell_update.{json,md}
    python benchmarks/cell_update.py --quick      # dims 256 and 512, few repeats
"""
from __future__ import annotations

import os

# idle OpenMP threads (PyTorch's) must sleep, not spin, or they starve numba's and JAX's threads
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (interleaved_medians, library_versions, markdown_table, median_time,  # noqa: E402
                     traced_peak_mib, write_results)


def reuse_freed_memory():
    """Keep freed blocks in the heap (no mmap/trim), so big arrays are not faulted in again."""
    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 32 << 20)   # M_MMAP_THRESHOLD: the maximum glibc accepts
    libc.mallopt(-1, 1 << 30)    # M_TRIM_THRESHOLD


def make_inputs(dims: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = (rng.random((dims, 1)) < 0.5).astype(np.float32)
    zb = (rng.random((dims, 1)) < 0.5).astype(np.float32)
    c, f, i, g = (rng.standard_normal((dims, dims)).astype(np.float32) for _ in range(4))
    return z, zb, c, f, i, g


def minflux_impls(z, zb):
    import minflux as mf

    from models.cells import cell_update

    def in_mode(mode):
        def run(c, f, i, g):
            return mf.withgradient(
                lambda c, f, i, g: mf.sum(cell_update(z, zb, c, f, i, g, mode=mode)), c, f, i, g)
        return run

    mixed, reverse = in_mode("mixed"), in_mode("reverse")

    def mixed_numpy(c, f, i, g):
        mf.set_elementwise_backend("numpy")
        try:
            return mixed(c, f, i, g)
        finally:
            mf.set_elementwise_backend("numba")

    return {"mixed (numba)": mixed, "adjoint (numba)": in_mode("adjoint"), "auto (numba)": in_mode("auto"),
            "mixed (numpy)": mixed_numpy, "reverse": reverse}


def numpy_reference(z, zb, c, f, i, g):
    """The value's sum and the four gradients, written with numpy in float64 (checks the hand loop)."""
    z, zb, c, f, i, g = (a.astype(np.float64) for a in (z, zb, c, f, i, g))
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    si, sf, tg = sig(i), sig(f), np.tanh(g)
    flush, copy = z == 1, (z != 1) & (zb == 0)
    update = ~(flush | copy)
    y = np.where(flush, si * tg, np.where(copy, c, sf * c + si * tg))
    dc = np.where(update, sf, np.where(copy, 1.0, 0.0)) + 0 * c
    df = np.where(update, c * sf * (1 - sf), 0.0)
    di = np.where(copy, 0.0, si * (1 - si) * tg) + 0 * c
    dg = np.where(copy, 0.0, si * (1 - tg * tg)) + 0 * c
    return float(y.sum()), (dc, df, di, dg)


def hand_written(z, zb):
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

    def run(c, f, i, g):
        outs = [np.empty_like(c) for _ in range(5)]
        kernel(z, zb, c, f, i, g, *outs)
        return float(outs[0].sum()), tuple(outs[1:])

    return run


def copy_bound(c, f, i, g):
    """The kernel's memory traffic alone: read c, f, i, g once, write five new arrays."""
    outs = [np.empty_like(c) for _ in range(5)]
    for out, a in zip(outs, (c, f, i, g)):
        np.copyto(out, a)
    outs[4].fill(0.0)
    return outs


def torch_impl(z, zb):
    import torch
    tz, tzb = torch.from_numpy(z), torch.from_numpy(zb)

    def run(c, f, i, g):
        ts = [torch.from_numpy(a).requires_grad_() for a in (c, f, i, g)]
        tc, tf, ti, tg = ts
        ig = torch.sigmoid(ti) * torch.tanh(tg)
        y = torch.where(tz == 1, ig, torch.where(tzb == 0, tc, torch.sigmoid(tf) * tc + ig))
        loss = y.sum()
        grads = torch.autograd.grad(loss, ts)
        return float(loss.detach()), tuple(gr.numpy() for gr in grads)

    return run


def jax_impl(z, zb):
    import jax
    import jax.numpy as jnp
    jz, jzb = jnp.asarray(z), jnp.asarray(zb)

    def loss(c, f, i, g):
        ig = jax.nn.sigmoid(i) * jnp.tanh(g)
        y = jnp.where(jz == 1, ig, jnp.where(jzb == 0, c, jax.nn.sigmoid(f) * c + ig))
        return y.sum()

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))

    def run(c, f, i, g):
        value, grads = step(c, f, i, g)
        grads = [np.asarray(gr.block_until_ready()) for gr in grads]
        return float(value), tuple(grads)

    return run


def peers(z, zb) -> dict:
    out = {}
    for name, make in (("PyTorch eager", torch_impl), ("JAX jit", jax_impl)):
        try:
            out[name] = make(z, zb)
        except ImportError:
            print(f"{name}: not installed, skipped", file=sys.stderr)
    return out


def _grads(result):
    grads = result[1]
    return [np.asarray(g, dtype=np.float64) for g in grads]


def worker(dims_list, repeats: int, malloc: str) -> dict:
    if malloc == "reuse":
        reuse_freed_memory()
    results = {"malloc": malloc, "dims": {}}
    for dims in dims_list:
        z, zb, c, f, i, g = make_inputs(dims)
        impls = dict(minflux_impls(z, zb))
        impls["hand-written numba"] = hand_written(z, zb)
        impls.update(peers(z, zb))
        args = (c, f, i, g)
        reference = _grads(numpy_reference(z, zb, *args))
        hand_error = max(float(np.max(np.abs(a - b))) for a, b in zip(_grads(impls["hand-written numba"](*args)), reference))
        if hand_error > 1e-4:
            raise SystemExit(f"the hand-written loop disagrees with numpy by {hand_error}")
        row = {"ms": {}, "max_grad_error": {}, "first_call_s": {}}
        for name, fn in impls.items():
            start = time.perf_counter()
            got = _grads(fn(*args))  # also the warm-up (compiles kernels and jit functions)
            row["first_call_s"][name] = time.perf_counter() - start
            row["max_grad_error"][name] = max(float(np.max(np.abs(a - b))) for a, b in zip(got, reference))
        close = ("mixed (numba)", "adjoint (numba)", "auto (numba)", "hand-written numba")
        timed = {name: (lambda fn=impls[name]: fn(*args)) for name in close}
        timed["copy bound"] = lambda: copy_bound(*args)
        seconds = interleaved_medians(timed, repeats=repeats)
        for name, fn in impls.items():   # the others alone (their thread pools spin after a call)
            if name not in seconds:
                reps = repeats if name not in ("mixed (numpy)", "reverse") else max(3, repeats // 3)
                seconds[name] = median_time(lambda: fn(*args), repeats=reps, warmup=1)
        for name in impls:
            row["ms"][name] = seconds[name] * 1e3
            print(f"[{malloc}] dims {dims} {name}: {row['ms'][name]:.2f} ms", file=sys.stderr)
        row["copy_bound_ms"] = seconds["copy bound"] * 1e3
        print(f"[{malloc}] dims {dims} copy bound: {row['copy_bound_ms']:.2f} ms", file=sys.stderr)
        row["peak_mib"] = {name: traced_peak_mib(impls[name], *args) for name in impls
                           if name in ("mixed (numba)", "adjoint (numba)", "auto (numba)", "reverse",
                                       "hand-written numba")}
        results["dims"][str(dims)] = row
    return results


def table(all_results: list, versions: str) -> str:
    parts = [f"Forward + gradient of the HM-LSTM cell update (sum of the output w.r.t. c, f, i, g), "
             f"float32 `(dims, dims)`, `(dims, 1)` Bernoulli(0.5) controls, median ms "
             f"(`python benchmarks/cell_update.py`; {versions}).\n"]
    for res in all_results:
        dims = list(res["dims"])
        names = list(res["dims"][dims[0]]["ms"])
        rows = []
        bound = {d: res["dims"][d].get("copy_bound_ms") for d in dims}
        last = res["dims"][dims[-1]]["ms"]
        for name in names:
            cells = [name] + [f"{res['dims'][d]['ms'][name]:.2f}" for d in dims]
            cells.append(f"{last[name] / last['hand-written numba']:.2f}x")
            cells.append(f"{last[name] / bound[dims[-1]]:.2f}x" if bound[dims[-1]] else "-")
            cells.append(f"{res['dims'][dims[0]]['first_call_s'][name]:.2f}")
            rows.append(cells)
        if bound[dims[-1]]:
            rows.append(["copy bound (same traffic)"] + [f"{bound[d]:.2f}" for d in dims]
                        + [f"{bound[dims[-1]] / last['hand-written numba']:.2f}x", "1.00x", "-"])
        label = "glibc default allocator" if res["malloc"] == "default" else \
            "freed memory kept in the process (mallopt)"
        parts.append(f"**{label}**\n")
        parts.append(markdown_table(["implementation"] + [f"dims {d}" for d in dims]
                                    + [f"time / hand loop at {dims[-1]}", f"time / copy bound at {dims[-1]}",
                                       f"first call s (dims {dims[0]})"], rows))
        mem_rows = [[name] + [f"{res['dims'][d]['peak_mib'][name]:.0f}" for d in dims]
                    for name in res["dims"][dims[0]]["peak_mib"]]
        parts.append(markdown_table(["peak MiB of one gradient"] + [f"dims {d}" for d in dims], mem_rows))
    return "\n".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", default="512,1024,2048")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--malloc", choices=("default", "reuse", "both"), default="both")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker-json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    dims = [256, 512] if args.quick else [int(d) for d in args.dims.split(",")]
    repeats = 3 if args.quick else args.repeats
    if args.worker_json:
        Path(args.worker_json).write_text(json.dumps(worker(dims, repeats, args.malloc)))
        return
    modes = ("default", "reuse") if args.malloc == "both" else (args.malloc,)
    all_results = []
    for mode in modes:
        out = Path(f"/tmp/minflux-cell-update-{mode}.json")
        subprocess.run([sys.executable, __file__, "--dims", ",".join(map(str, dims)), "--repeats",
                        str(repeats), "--malloc", mode, "--worker-json", str(out)], check=True)
        all_results.append(json.loads(out.read_text()))
    write_results("cell_update", {"results": all_results}, table(all_results, library_versions(("numba", "torch", "jax"))))


if __name__ == "__main__":
    main()
