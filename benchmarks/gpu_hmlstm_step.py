"""One HM-LSTM training step on the GPU at the paper's PTB size (3 x 512, embedding 128, batch 64,
segment 100): forward, gradient, gradient-norm clipping at 1 and an Adam update, all on CuPy.

Reports the median step time and tokens per second for minflux mixed and reverse mode (and PyTorch
CUDA eager when it runs), and whether a step runs under `mf.no_host_transfers` (no device-to-host
copy inside the step), with the first offending copy when it does not.

    python benchmarks/gpu_hmlstm_step.py [--repeats 3] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402

PTB = dict(hidden=512, layers=3, embed=128, batch=64, length=100, vocab=50)


def minflux_step(size: dict, mode: str):
    """A closure running one training step on the GPU, and the device synchronisation."""
    import cupy

    from models import HMLSTM

    rng = np.random.default_rng(0)
    model = HMLSTM(size["vocab"], embed_size=size["embed"], hidden_sizes=(size["hidden"],) * size["layers"],
                   cell_form="branch", mode=mode, rng=rng)
    model = mf.to_device(model, "gpu")
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(0.002)), model)
    tokens = rng.integers(0, size["vocab"], size=(size["batch"], size["length"] + 1))
    x, y = mf.to_device((tokens[:, :-1], tokens[:, 1:]), "gpu")
    state = model.initial_state(size["batch"])

    def loss_fn(m):
        logits, new_state, _ = m(x, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, size["vocab"])), mf.reshape(y, (-1,))), new_state

    def step():
        _, (grads,) = mf.withgradient(loss_fn, model)
        mf.optim.update(opt, model, grads)

    return step, cupy.cuda.Device().synchronize


def torch_step(size: dict):
    import torch

    from models import HMLSTM
    from torch_hmlstm import TorchHMLSTM, make_step

    model = HMLSTM(size["vocab"], embed_size=size["embed"], hidden_sizes=(size["hidden"],) * size["layers"],
                   cell_form="branch", rng=np.random.default_rng(0))
    dev = torch.device("cuda")
    peer = TorchHMLSTM.from_minflux(model).to(dev)
    tokens = torch.from_numpy(np.random.default_rng(0).integers(0, size["vocab"], (size["batch"], size["length"] + 1)))
    step = make_step(peer, tokens[:, :-1].to(dev), tokens[:, 1:].to(dev))

    return step, torch.cuda.synchronize


def timed(step, sync, repeats: int) -> dict:
    start = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - start          # includes compiling the CUDA kernels
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - start)
    return {"first_step_s": first, "seconds": statistics.median(times)}


def guard_check(step) -> dict:
    """Run one (warm) step under no_host_transfers: does it copy device data to the host?"""
    try:
        with mf.no_host_transfers():
            step()
        return {"host_transfer_free": True}
    except mf.HostTransferError as exc:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/minflux/" in f.filename
                  or "/models/" in f.filename]
        where = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "unknown"
        return {"host_transfer_free": False, "first_transfer": where, "message": str(exc)[:300]}


def run(size: dict, repeats: int) -> dict:
    tokens = size["batch"] * size["length"]
    out = {"size": size}
    for mode in ("mixed", "reverse"):
        try:
            step, sync = minflux_step(size, mode)
            entry = timed(step, sync, repeats)
            entry["tokens_per_s"] = tokens / entry["seconds"]
            if mode == "mixed":
                entry.update(guard_check(step))
            out[mode] = entry
        except Exception as exc:
            out[mode] = f"failed: {type(exc).__name__}: {exc}"
        print(f"{mode}: {out[mode]}", flush=True)
    try:
        step, sync = torch_step(size)
        entry = timed(step, sync, repeats)
        entry["tokens_per_s"] = tokens / entry["seconds"]
        out["torch_eager"] = entry
    except Exception as exc:
        out["torch_eager"] = f"unavailable: {type(exc).__name__}: {exc}"
    print(f"torch_eager: {out['torch_eager']}", flush=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the results here (default: print them)")
    args = parser.parse_args(argv)
    if not mf.gpu_available():
        print("gpu_hmlstm_step: no GPU (CuPy with a CUDA device is needed)", file=sys.stderr)
        return 2
    results = run(PTB, args.repeats)
    text = json.dumps(results, indent=2)
    if args.json:
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
