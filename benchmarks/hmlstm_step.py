"""One HM-LSTM training step (forward, gradient, global-norm clip at 1, Adam): minflux against
strong PyTorch eager and JAX jit peers, side by side in one process.

Sizes: the paper's PTB model (3 x 512, embedding 128, batch 64, segment 100) and a small one
(2 x 128, batch 32, segment 50), each with and without layer norm. Every implementation starts from
the same weights (the peers are built from the minflux model: `torch_hmlstm.py`, `jax_hmlstm.py`)
and trains on the same tokens. Reported: the first step (compilation included: numba kernels from
a warm disk cache, XLA's compile, PyTorch's none), then the median over repeats (one step of each
implementation per round), tokens per second,
and the step's peak memory: the process's peak resident set during the step (reset through
``/proc/self/clear_refs``) minus its resident set before it after ``malloc_trim``, the same measure
for all three.

Every library runs single-threaded (minflux's kernel pool and BLAS, ``torch.set_num_threads(1)``,
XLA without its Eigen thread pool): on a small shared machine two thread pools slow each other down.

    python benchmarks/hmlstm_step.py [--sizes small,ptb] [--repeats 5] [--impls auto,mixed,reverse,torch,jax]
"""
from __future__ import annotations

import os

for _var in ("MINFLUX_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402
from _common import library_versions, markdown_table, write_results  # noqa: E402
from models import HMLSTM  # noqa: E402
from models.boundaries import operations  # noqa: E402

SIZES = {
    "small": dict(hidden=128, layers=2, embed=128, batch=32, length=50),
    "ptb": dict(hidden=512, layers=3, embed=128, batch=64, length=100),
}
VOCAB = 50
LR = 0.002


def build_model(size, layer_norm, mode="mixed"):
    return HMLSTM(VOCAB, embed_size=size["embed"], hidden_sizes=(size["hidden"],) * size["layers"],
                  layer_norm=layer_norm, cell_form="branch", mode=mode, rng=np.random.default_rng(0),
                  dtype=np.float32)


def batch(size):
    tokens = np.random.default_rng(1).integers(0, VOCAB, size=(size["batch"], size["length"] + 1))
    return tokens[:, :-1], tokens[:, 1:]


def minflux_step(size, layer_norm, mode):
    model = build_model(size, layer_norm, mode)
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(LR)), model)
    x, y = batch(size)
    state = model.initial_state(size["batch"])

    def loss_fn(m):
        logits, _, boundaries = m(x, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, VOCAB)), y.reshape(-1)), boundaries

    def step():
        (_, boundaries), (grads,) = mf.withgradient(loss_fn, model)
        mf.optim.update(opt, model, grads)
        copying = operations(boundaries)[..., 1:] == 0    # the layers above the first (zero initial z)
        step.copy_fractions.append(float(copying.mean()))

    step.copy_fractions = []
    return step


def torch_step(size, layer_norm):
    import torch

    from torch_hmlstm import TorchHMLSTM, make_step

    peer = TorchHMLSTM.from_minflux(build_model(size, layer_norm))
    x, y = (torch.from_numpy(a.copy()) for a in batch(size))
    return make_step(peer, x, y, lr=LR)


def jax_step(size, layer_norm):
    import jax

    import jax_hmlstm

    params, config = jax_hmlstm.params_from_minflux(build_model(size, layer_norm))
    x, y = (jax.numpy.asarray(a, dtype=np.int32) for a in batch(size))
    state = jax_hmlstm.initial_state(config, size["batch"])
    jitted = jax_hmlstm.make_step(config, lr=LR)
    carry = [params, jax_hmlstm.adam_init(params)]

    def step():
        carry[0], carry[1], loss = jitted(carry[0], carry[1], x, y, state)
        loss.block_until_ready()

    return step


BUILDERS = {
    "auto": lambda size, ln: minflux_step(size, ln, "auto"),
    "mixed": lambda size, ln: minflux_step(size, ln, "mixed"),
    "reverse": lambda size, ln: minflux_step(size, ln, "reverse"),
    "torch": torch_step,
    "jax": jax_step,
}
LABELS = {"auto": "minflux auto", "mixed": "minflux mixed", "reverse": "minflux reverse",
          "torch": "PyTorch eager", "jax": "JAX jit"}


def _rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def peak_step_bytes(step) -> int | None:
    """Peak resident memory a step adds to the process (Linux with glibc only; None elsewhere).

    ``malloc_trim`` first hands the heap's free memory back to the system, so the resident set
    before the step is what is live (weights, optimiser state, compiled code) and the peak above it
    is what the step allocates at its high-water mark."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
        before = _rss_kib("VmRSS")
        step()
        return (_rss_kib("VmHWM") - before) * 1024
    except (OSError, AttributeError):
        step()
        return None


def measure(impls, size, layer_norm, repeats) -> dict:
    """Each implementation's first step (compilation included), then its steps timed in turns (one
    step of each per round, so a change of machine load falls on all alike), then its peak memory."""
    steps, results = {}, {}
    for impl in impls:
        start = time.perf_counter()
        steps[impl] = BUILDERS[impl](size, layer_norm)
        steps[impl]()
        results[impl] = {"first_step_s": time.perf_counter() - start, "times": []}
    for _ in range(repeats):
        for impl, step in steps.items():
            start = time.perf_counter()
            step()
            results[impl]["times"].append(time.perf_counter() - start)
    for impl, step in steps.items():
        r = results[impl]
        r["seconds"] = statistics.median(r["times"])
        r["peak_bytes"] = peak_step_bytes(step)
        if hasattr(step, "copy_fractions"):
            r["copy_fraction"] = statistics.mean(step.copy_fractions[1:1 + repeats])
    return results


def matmul_rates(size) -> dict:
    """Single-threaded GFLOP/s of one step's product shape, ``(B, 3H) @ (3H, 4H)``, per library."""
    shape = (size["batch"], 3 * size["hidden"], 4 * size["hidden"])
    a = np.random.default_rng(0).random(shape[:2], dtype=np.float32)
    b = np.random.default_rng(1).random(shape[1:], dtype=np.float32)
    products = {"numpy": lambda: a @ b}
    try:
        import torch
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        products["torch"] = lambda: ta @ tb
    except ImportError:
        pass
    try:
        import jax
        ja, jb = jax.numpy.asarray(a), jax.numpy.asarray(b)
        jitted = jax.jit(lambda a, b: a @ b)
        products["jax"] = lambda: jitted(ja, jb).block_until_ready()
    except ImportError:
        pass
    rates = {}
    for name, product in products.items():
        product()
        times = []
        for _ in range(20):
            start = time.perf_counter()
            product()
            times.append(time.perf_counter() - start)
        rates[name] = 2 * np.prod(shape) / statistics.median(times) / 1e9
    return {"shape": shape, "gflops": rates}


def settings() -> str:
    return (f"single-threaded everywhere (MINFLUX_NUM_THREADS={os.environ['MINFLUX_NUM_THREADS']}, "
            f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}, torch.set_num_threads(1), "
            f"XLA_FLAGS='{os.environ['XLA_FLAGS']}'); {library_versions()}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,ptb")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--impls", default="auto,mixed,reverse,torch,jax")
    parser.add_argument("--layer-norm", default="off,on", help="off, on or off,on")
    args = parser.parse_args(argv)
    impls = args.impls.split(",")
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        impls = [i for i in impls if i != "torch"]
    try:
        import jax  # noqa: F401
    except ImportError:
        impls = [i for i in impls if i != "jax"]
    load_before = os.getloadavg()
    results, rows = {}, []
    for name in args.sizes.split(","):
        size = SIZES[name]
        tokens = size["batch"] * size["length"]
        for ln in args.layer_norm.split(","):
            layer_norm = ln == "on"
            key = f"{name}{'_ln' if layer_norm else ''}"
            entry = measure(impls, size, layer_norm, args.repeats)
            for impl, r in entry.items():
                r["tokens_per_s"] = tokens / r["seconds"]
                print(f"{key} {impl}: {r['seconds'] * 1e3:.0f} ms (first {r['first_step_s']:.1f} s)", file=sys.stderr)
            results[key] = {"size": size, "layer_norm": layer_norm, **entry}
            for impl, r in entry.items():
                vs = [f"{r['tokens_per_s'] / entry[p]['tokens_per_s']:.2f}x" if p in entry else "n/a"
                      for p in ("torch", "jax")]
                peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.0f} MiB"
                copying = f"{r['copy_fraction']:.0%}" if "copy_fraction" in r else ""
                rows.append([name, "on" if layer_norm else "off", LABELS[impl], f"{r['seconds'] * 1e3:.0f}",
                             f"{r['tokens_per_s']:.0f}", *vs, f"{r['first_step_s']:.1f}", peak, copying])
    load_after = os.getloadavg()
    rates = {name: matmul_rates(SIZES[name]) for name in args.sizes.split(",")}
    results["matmul_rates"] = rates
    results["settings"] = settings()
    results["load_average_1min"] = [load_before[0], load_after[0]]
    table = markdown_table(["size", "layer norm", "implementation", "ms / step", "tokens / s", "vs PyTorch",
                            "vs JAX", "first step (s)", "step peak memory", "COPY rows (upper layers)"], rows)
    table += (f"\nMedian of {args.repeats} steps after the first, the implementations timed in turns; "
              f"{settings()}. Load average (1 min) "
              f"{load_before[0]:.1f} before and {load_after[0]:.1f} after, on 2 cores shared with other work. "
              "minflux skips the gate products of the rows that COPY (their share is the last column; "
              "the peers compute every row). One step's matrix product, single-threaded, in GFLOP/s: "
              + "; ".join(f"{name} {r['shape'][0]}x{r['shape'][1]} @ {r['shape'][1]}x{r['shape'][2]}: "
                          + ", ".join(f"{lib} {rate:.0f}" for lib, rate in r["gflops"].items())
                          for name, r in rates.items()) + ".\n")
    write_results("hmlstm_step", results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
