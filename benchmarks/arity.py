"""Cost against the number of differentiable inputs: f(x1..xN) = prod_k (x_k if x_k > 0.5 else -x_k).

Forward plus the gradient of ``sum(f)`` w.r.t. all N inputs, float32 ``(dims, dims)`` arrays, for
N = 1..10 and 18 (the arity benchmark of Revels et al. 2018), compared side by side in one process:
minflux mixed mode (duals), the element-local adjoint, ``mode="auto"`` (the cost model's pick) and
``mode="reverse"``, a hand-written parallel numba loop (value and
N gradients in one pass, prefix/suffix products), and PyTorch eager / JAX jit when importable.
Memory traffic grows linearly with N (N inputs, N gradients); forward mode's arithmetic grows as N^2
but stays below the memory cost at these sizes.

    python benchmarks/arity.py                 # writes benchmarks/results/arity.{json,md}
    python benchmarks/arity.py --quick
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep (see cell_update.py)

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (interleaved_medians, markdown_table, median_time, source_module,  # noqa: E402
                     traced_peak_mib, write_results)


def scalar_function(n: int):
    """The scalar function of n arguments, written out as source (the compiler reads source)."""
    args = ", ".join(f"x{k}" for k in range(n))
    factors = " * ".join(f"(x{k} if x{k} > 0.5 else -x{k})" for k in range(n))
    return getattr(source_module(f"arity_fn_{n}", f"def f({args}):\n    return {factors}\n"), "f")


def hand_written(n: int):
    """A parallel numba loop: the value and all n gradients with prefix and suffix products."""
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

    def run(*xs):
        y = np.empty_like(xs[0])
        gs = [np.empty_like(xs[0]) for _ in xs]
        kernel(y, *xs, *gs)
        return float(y.sum()), gs

    return run


def minflux_impls(n: int):
    import minflux as mf
    f = scalar_function(n)

    def in_mode(mode):
        def run(*xs):
            return mf.withgradient(lambda *xs: mf.sum(mf.broadcast(f, *xs, mode=mode)), *xs)
        return run

    return {"mixed (numba)": in_mode("mixed"), "adjoint (numba)": in_mode("adjoint"),
            "auto (numba)": in_mode("auto"), "reverse": in_mode("reverse")}


def numpy_reference(xs):
    """The N gradients of the sum, in float64 numpy (checks the hand loop before it is timed)."""
    factors = [np.where(x > 0.5, x, -x).astype(np.float64) for x in xs]
    total = np.prod(factors, axis=0)
    return [np.prod([f for j, f in enumerate(factors) if j != k], axis=0) * np.where(x > 0.5, 1.0, -1.0)
            if len(xs) > 1 else np.where(x > 0.5, 1.0, -1.0) + 0 * total for k, x in enumerate(xs)]


def torch_impl():
    import torch

    def run(*xs):
        ts = [torch.from_numpy(x).requires_grad_() for x in xs]
        y = ts[0].new_ones(())
        for t in ts:
            y = y * torch.where(t > 0.5, t, -t)
        loss = y.sum()
        grads = torch.autograd.grad(loss, ts)
        return float(loss.detach()), [g.numpy() for g in grads]

    return run


def jax_impl(n: int):
    import jax
    import jax.numpy as jnp

    def loss(*xs):
        y = 1.0
        for x in xs:
            y = y * jnp.where(x > 0.5, x, -x)
        return y.sum()

    step = jax.jit(jax.value_and_grad(loss, argnums=tuple(range(n))))

    def run(*xs):
        value, grads = step(*xs)
        return float(value), [np.asarray(g.block_until_ready()) for g in grads]

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--arities", default="1,2,3,4,5,6,7,8,9,10,18")
    args = parser.parse_args()
    arities = [1, 2, 4, 8] if args.quick else [int(a) for a in args.arities.split(",")]
    dims = 256 if args.quick else args.dims
    repeats = 3 if args.quick else args.repeats
    rng = np.random.default_rng(0)
    rows, data = [], {}
    for n in arities:
        xs = [rng.uniform(-1, 1, (dims, dims)).astype(np.float32) for _ in range(n)]
        impls = dict(minflux_impls(n))
        impls["hand-written numba"] = hand_written(n)
        try:
            impls["PyTorch eager"] = torch_impl()
        except ImportError:
            pass
        try:
            impls["JAX jit"] = jax_impl(n)
        except ImportError:
            pass
        reference = numpy_reference(xs)
        hand = [np.asarray(g, np.float64) for g in impls["hand-written numba"](*xs)[1]]
        if max(float(np.max(np.abs(a - b))) for a, b in zip(hand, reference)) > 1e-4:
            raise SystemExit(f"N={n}: the hand-written loop disagrees with numpy")
        times, errors, first, peak = {}, {}, {}, {}
        for name, fn in impls.items():
            start = time.perf_counter()
            grads = fn(*xs)[1]  # warm-up: compiles kernels and jit functions
            first[name] = time.perf_counter() - start
            if name in ("mixed (numba)", "adjoint (numba)", "auto (numba)", "hand-written numba"):
                peak[name] = traced_peak_mib(fn, *xs)
            errors[name] = max(float(np.max(np.abs(np.asarray(g, np.float64) - r)))
                               for g, r in zip(grads, reference))
        close = ("mixed (numba)", "adjoint (numba)", "auto (numba)", "hand-written numba")
        seconds = interleaved_medians({name: (lambda fn=impls[name]: fn(*xs)) for name in close},
                                      repeats=repeats)
        for name, fn in impls.items():   # the others alone (their thread pools spin after a call)
            if name not in seconds:
                seconds[name] = median_time(lambda: fn(*xs), repeats=repeats, warmup=1)
        for name in impls:
            times[name] = seconds[name] * 1e3
            print(f"N={n} {name}: {times[name]:.2f} ms", file=sys.stderr)
        best = min(times["mixed (numba)"], times["adjoint (numba)"])
        data[n] = {"ms": times, "auto_over_faster_fixed_mode": times["auto (numba)"] / best, "max_grad_error_vs_numpy": errors, "first_call_s": first, "peak_mib": peak}
        names = list(times)
        hand_ms = times["hand-written numba"]
        rows.append([n] + [f"{times[k]:.2f}" for k in names]
                    + [f"{times['mixed (numba)'] / hand_ms:.2f}x", f"{times['auto (numba)'] / hand_ms:.2f}x",
                       f"{data[n]['auto_over_faster_fixed_mode']:.2f}x",
                       f"{first['mixed (numba)']:.2f} / {first['adjoint (numba)']:.2f}",
                       f"{peak['auto (numba)']:.0f} / {peak['hand-written numba']:.0f}"])
    header = ["N"] + [f"{k} ms" for k in names] + ["mixed / hand", "auto / hand", "auto / faster of mixed, adjoint",
                                                   "first call s (mixed / adjoint)", "peak MiB (auto / hand)"]
    table = (f"Forward + gradient of `sum(prod_k (x_k if x_k > 0.5 else -x_k))` w.r.t. all N inputs, "
             f"float32 ({dims}, {dims}), median ms (the minflux modes and the hand loop called in turns) "
             f"(`python benchmarks/arity.py`).\n\n"
             + markdown_table(header, rows))
    write_results("arity", {"dims": dims, "results": data}, table)


if __name__ == "__main__":
    main()
