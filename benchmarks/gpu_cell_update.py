"""The HM-LSTM cell update on the GPU: forward plus the gradient of the sum w.r.t. c, f, i, g.

Compares, side by side in one process and on float32 ``(dims, dims)`` arrays with ``z``/``zb``
Bernoulli(0.5) control vectors of shape ``(dims, 1)``:

- ``mixed``: minflux mixed mode on CuPy (the CUDA backend's fused kernel, then the tape's products),
- ``mixed_kernel``: the fused kernel alone (the value and the four partials in one pass),
- ``reverse``: minflux ``mode="reverse"`` on CuPy (one tape node per op, branches as ``where``),
- ``torch_eager``: PyTorch CUDA eager (a ``torch.where`` chain and ``backward``),
- ``jax_jit``: ``jax.jit(jax.value_and_grad(...))`` on the GPU,
- ``copy_bound``: a device-to-device copy that reads and writes as many bytes as the ideal fused
  gradient (read c, f, i, g once; write the value and four gradients once): the memory-bandwidth bound.

Times are medians over ``--repeats`` runs, each ending with a device synchronisation. At the smallest
size the gradients of every implementation are compared with mixed mode's.

    python benchmarks/gpu_cell_update.py [--dims 512,1024,2048,4096,8192] [--repeats 10] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU with CuPy and torch

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402
from models.cells import cell_update  # noqa: E402


def host_inputs(dims: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    z = (rng.random((dims, 1)) < 0.5).astype(np.float32)
    zb = (rng.random((dims, 1)) < 0.5).astype(np.float32)
    return [z, zb] + [rng.standard_normal((dims, dims)).astype(np.float32) for _ in range(4)]


def timed(fn, sync, repeats: int, warmup: int = 2) -> float:
    """Median seconds of ``fn(); sync()``."""
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- minflux on CuPy ---------------------------------------------------------------------------------

def minflux_gradient(arrays, mode: str):
    z, zb, c, f, i, g = arrays

    def loss(c, f, i, g):
        return mf.sum(cell_update(z, zb, c, f, i, g, mode=mode))

    return lambda: mf.withgradient(loss, c, f, i, g)


def minflux_kernel(arrays):
    """The fused kernel alone: value and four partials, as the tape's broadcast node receives them."""
    from minflux.compiler import compiled

    kinds = ("f",) * 6
    shape = arrays[2].shape
    return lambda: compiled(cell_update.fn).run(arrays, kinds, np.dtype(np.float32), (2, 3, 4, 5), shape)


def cupy_setup(host):
    import cupy

    return [cupy.asarray(a) for a in host], cupy.cuda.Device().synchronize


def copy_bound(nbytes_moved: int, repeats: int) -> float:
    """Seconds of a device-to-device copy that reads and writes ``nbytes_moved`` bytes in total."""
    import cupy

    n = nbytes_moved // 2 // 4
    src = cupy.ones(n, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    seconds = timed(lambda: cupy.copyto(dst, src), cupy.cuda.Device().synchronize, repeats)
    del src, dst
    return seconds


# -- peers -------------------------------------------------------------------------------------------

def torch_gradient(host):
    import torch

    dev = torch.device("cuda")
    z, zb, *rest = [torch.from_numpy(a).to(dev) for a in host]
    leaves = [t.clone().requires_grad_(True) for t in rest]

    def step():
        c, f, i, g = leaves
        for t in leaves:
            t.grad = None
        flush = torch.sigmoid(i) * torch.tanh(g)
        update = torch.sigmoid(f) * c + flush
        out = torch.where(z == 1, flush, torch.where(zb == 0, c, update))
        out.sum().backward()
        return [t.grad for t in leaves]

    return step, torch.cuda.synchronize


def jax_gradient(host):
    import jax
    import jax.numpy as jnp

    gpu = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpu:
        raise RuntimeError("JAX sees no GPU (install jax[cuda12])")
    z, zb, c, f, i, g = [jax.device_put(a, gpu[0]) for a in host]

    def loss(c, f, i, g):
        flush = jax.nn.sigmoid(i) * jnp.tanh(g)
        update = jax.nn.sigmoid(f) * c + flush
        return jnp.sum(jnp.where(z == 1, flush, jnp.where(zb == 0, c, update)))

    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3)))
    holder = {}

    def step():
        holder["out"] = fn(c, f, i, g)
        return holder["out"]

    return step, lambda: jax.block_until_ready(holder.get("out"))


# -- checks and main ---------------------------------------------------------------------------------

def _host(x):
    if hasattr(x, "get"):
        return x.get()
    if hasattr(x, "detach"):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def agreement(host) -> dict:
    """Max |difference| of each implementation's gradients from mixed mode's (small size)."""
    arrays, sync = cupy_setup(host)
    _, ref = minflux_gradient(arrays, "mixed")()
    ref = [_host(r) for r in ref]
    cpu = mf.withgradient(lambda c, f, i, g: mf.sum(cell_update(*host[:2], c, f, i, g)), *host[2:])[1]
    out = {"numpy_cpu": max(float(np.abs(a - b).max()) for a, b in zip(cpu, ref))}
    _, rev = minflux_gradient(arrays, "reverse")()
    out["reverse"] = max(float(np.abs(_host(a) - b).max()) for a, b in zip(rev, ref))
    for name, make in (("torch_eager", torch_gradient), ("jax_jit", jax_gradient)):
        try:
            step, _ = make(host)
            got = step()
            got = got[1] if name == "jax_jit" else got
            out[name] = max(float(np.abs(_host(a) - b).max()) for a, b in zip(got, ref))
        except Exception as exc:  # a missing peer is recorded, not fatal
            out[name] = f"unavailable: {type(exc).__name__}: {exc}"
    return out


def run(dims_list, repeats: int) -> dict:
    results = {"dims": {}, "agreement_at": dims_list[0]}
    results["agreement"] = agreement(host_inputs(dims_list[0]))
    for dims in dims_list:
        host = host_inputs(dims)
        entry = {}
        arrays, sync = cupy_setup(host)
        entry["mixed_kernel"] = timed(minflux_kernel(arrays), sync, repeats)
        entry["mixed"] = timed(minflux_gradient(arrays, "mixed"), sync, repeats)
        entry["reverse"] = timed(minflux_gradient(arrays, "reverse"), sync, max(3, repeats // 2))
        del arrays
        for name, make in (("torch_eager", torch_gradient), ("jax_jit", jax_gradient)):
            try:
                step, peer_sync = make(host)
                entry[name] = timed(step, peer_sync, repeats)
            except Exception as exc:
                entry[name] = f"unavailable: {type(exc).__name__}: {exc}"
        ideal_bytes = 9 * dims * dims * 4          # read c, f, i, g; write value + 4 gradients
        entry["ideal_bytes"] = ideal_bytes
        entry["copy_bound"] = copy_bound(ideal_bytes, repeats)
        for name in ("mixed", "mixed_kernel", "reverse", "torch_eager", "jax_jit"):
            if isinstance(entry.get(name), float):
                entry[f"{name}_over_bound"] = entry[name] / entry["copy_bound"]
        results["dims"][str(dims)] = entry
        _free_pools()
        print(f"dims {dims}: " + ", ".join(f"{k} {v * 1e3:.3f} ms" for k, v in entry.items()
                                           if isinstance(v, float) and not k.endswith("bound")), flush=True)
    return results


def _free_pools():
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()
    try:
        import torch
        torch.cuda.empty_cache()
    except Exception:
        pass


def table(results: dict) -> str:
    from _common import markdown_table

    rows = []
    for dims, e in results["dims"].items():
        def ms(name):
            v = e.get(name)
            return f"{v * 1e3:.3f}" if isinstance(v, float) else "n/a"
        ratio = e.get("mixed_over_bound")
        rows.append([dims, ms("mixed"), ms("mixed_kernel"), ms("reverse"), ms("torch_eager"), ms("jax_jit"),
                     ms("copy_bound"), f"{ratio:.2f}x" if ratio else "n/a"])
    return markdown_table(["dims", "mixed (ms)", "fused kernel only", "reverse", "PyTorch eager",
                           "JAX jit", "copy bound", "mixed / bound"], rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", default="512,1024,2048,4096,8192")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--json", help="write the results here (default: print them)")
    args = parser.parse_args(argv)
    if not mf.gpu_available():
        print("gpu_cell_update: no GPU (CuPy with a CUDA device is needed)", file=sys.stderr)
        return 2
    results = run([int(d) for d in args.dims.split(",")], args.repeats)
    results["table"] = table(results)
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(results["table"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
