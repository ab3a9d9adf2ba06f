"""Automatic fusion of ordinary elementwise code: a chain of k ops, forward + gradient w.r.t. two inputs.

The chain mixes arithmetic, ``tanh``, ``sigmoid`` and ``where`` on a comparison, written the ordinary
way (operators and ``mf.*`` calls), on float32 ``(dims, dims)`` arrays; the loss is its sum. Side by
side in one process, medians:

* minflux fused: the default, the chain computed as one mixed-mode kernel (the structure is compiled
  during warm-up; its cold compile time is reported separately);
* minflux unfused: ``mf.set_fusion(enabled=False)``, one tape node and one pass per op;
* one hand-written ``@mf.elementwise`` function of the same chain (the best minflux could do before);
* PyTorch eager (its fast paths: in-place-free autograd over ATen kernels, threads set to the cores),
  ``torch.compile`` (inductor, fused C++ kernels) and ``jax.jit`` of ``value_and_grad`` where they
  import and compile.

Every implementation's gradients are checked against the unfused minflux result before timing.

    python benchmarks/fusion.py            # writes benchmarks/results/fusion.{json,md}
    python benchmarks/fusion.py --quick
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # idle OpenMP threads sleep between peers

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import markdown_table, median_time, source_module, write_results  # noqa: E402

# op j of the chain, as a template over the running value h and the second input y
STEPS = ["h * y", "tanh(h)", "h + 0.5 * y", "sigmoid(h)", "where(h > 0.25, h, y * h)", "h - y * 0.125",
         "tanh(h * 1.5)", "h * h + y"]


def chain(k: int) -> list[str]:
    return [STEPS[j % len(STEPS)] for j in range(k)]


def minflux_ordinary(k: int):
    """The chain as ordinary minflux code (operators and mf.* calls)."""
    lines = ["import minflux as mf", "from minflux import tanh, sigmoid, where", "",
             "def loss(x, y):", "    h = x"]
    lines += [f"    h = {step}" for step in chain(k)]
    lines += ["    return mf.sum(h)"]
    return source_module(f"fusion_ordinary_{k}", "\n".join(lines) + "\n").loss


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


def torch_loss(k: int):
    import torch

    def loss(x, y):
        h = x
        for step in chain(k):
            h = eval(step, {"tanh": torch.tanh, "sigmoid": torch.sigmoid, "where": torch.where, "h": h, "y": y})
        return h.sum()

    return loss


def torch_run(loss):
    import torch

    def run(x, y):
        tx, ty = torch.from_numpy(x).requires_grad_(), torch.from_numpy(y).requires_grad_()
        value = loss(tx, ty)
        gx, gy = torch.autograd.grad(value, (tx, ty))
        return float(value.detach()), [gx.numpy(), gy.numpy()]

    return run


def jax_run(k: int):
    import jax
    import jax.numpy as jnp

    def loss(x, y):
        h = x
        for step in chain(k):
            h = eval(step, {"tanh": jnp.tanh, "sigmoid": jax.nn.sigmoid, "where": jnp.where, "h": h, "y": y})
        return h.sum()

    step = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))

    def run(x, y):
        value, grads = step(x, y)
        return float(value), [np.asarray(g.block_until_ready()) for g in grads]

    return run


def implementations(k: int, threads: int) -> dict:
    import minflux as mf

    ordinary = minflux_ordinary(k)
    by_hand = minflux_elementwise(k)

    def fused(x, y):
        value, grads = mf.withgradient(ordinary, x, y)
        return float(value), list(grads)

    def unfused(x, y):
        old = mf.set_fusion(enabled=False)
        try:
            value, grads = mf.withgradient(ordinary, x, y)
        finally:
            mf.set_fusion(**old)
        return float(value), list(grads)

    def elementwise(x, y):
        value, grads = mf.withgradient(by_hand, x, y)
        return float(value), list(grads)

    impls = {"minflux fused": fused, "minflux unfused": unfused, "one @mf.elementwise": elementwise}
    try:
        import torch

        torch.set_num_threads(threads)
        impls["PyTorch eager"] = torch_run(torch_loss(k))
        compiled = torch.compile(torch_loss(k))
        impls["torch.compile"] = torch_run(compiled)
    except ImportError:
        pass
    try:
        impls["JAX jit"] = jax_run(k)
    except ImportError:
        pass
    return impls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dims", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("MINFLUX_CACHE_DIR", tempfile.mkdtemp(prefix="minflux-fusion-cache-"))
    import minflux as mf

    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ks = [2, 4] if args.quick else [2, 4, 8, 16]
    dims = 256 if args.quick else args.dims
    repeats = 3 if args.quick else args.repeats
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (dims, dims)).astype(np.float32)
    y = rng.uniform(-1, 1, (dims, dims)).astype(np.float32)
    rows, data, names = [], {}, []
    for k in ks:
        impls = implementations(k, threads)
        old = mf.set_fusion(compile_after=1)
        start = time.perf_counter()
        impls["minflux fused"](x, y)   # cold: the structure's kernel is compiled here
        compile_s = time.perf_counter() - start
        mf.set_fusion(**old)
        mf.fusion_stats(reset=True)
        impls["minflux fused"](x, y)
        stats = mf.fusion_stats()
        reference = impls["minflux unfused"](x, y)[1]
        times, errors, first = {}, {}, {}
        for name, fn in list(impls.items()):
            try:
                start = time.perf_counter()
                grads = fn(x, y)[1]
                first[name] = time.perf_counter() - start
            except Exception as e:  # a peer that cannot compile here is reported, not timed
                print(f"k={k} {name}: skipped ({type(e).__name__}: {e})", file=sys.stderr)
                del impls[name]
                continue
            errors[name] = max(float(np.max(np.abs(np.asarray(g, np.float64) - r))) for g, r in zip(grads, reference))
            if errors[name] > 1e-3:
                raise AssertionError(f"{name} disagrees with minflux unfused at k={k}: {errors[name]}")
            times[name] = median_time(lambda: fn(x, y), repeats=repeats, warmup=1) * 1e3
            print(f"k={k} {name}: {times[name]:.2f} ms", file=sys.stderr)
        data[k] = {"ms": times, "max_grad_error_vs_unfused": errors, "minflux_fused_compile_s": compile_s,
                   "first_call_s": first, "fused_launches_per_step": stats["fused_launches"]}
        names = list(times)
        rows.append([k] + [f"{times[n]:.2f}" for n in names]
                    + [f"{times['minflux fused'] / times['one @mf.elementwise']:.2f}x",
                       f"{times['minflux unfused'] / times['minflux fused']:.2f}x", f"{compile_s:.2f}"])
    header = (["k"] + [f"{n} ms" for n in names]
              + ["fused / @mf.elementwise", "unfused / fused", "fused cold compile s"])
    table = (f"Forward + gradient w.r.t. two inputs of a chain of k elementwise ops written the ordinary way "
             f"(arithmetic, tanh, sigmoid, where on a comparison), float32 ({dims}, {dims}), median ms, "
             f"{threads} threads (`python benchmarks/fusion.py`).\n\n" + markdown_table(header, rows))
    write_results("fusion", {"dims": dims, "threads": threads, "results": data}, table)


if __name__ == "__main__":
    main()
