"""One HM-LSTM training step (forward, gradient, global-norm clip at 1, Adam): minflux against
strong PyTorch eager and JAX jit peers, each in its own process, on one core and on all cores.

Sizes: the paper's PTB model (3 x 512, embedding 128, batch 64, segment 100), a small one (2 x 128,
batch 32, segment 50), each with and without layer norm, and the default experiment's model
(3 x 128, embedding 64, output embedding 256, layer norm, blend, batch 32, segment 50). Every
implementation starts from the same weights (the peers are built from the minflux model:
`torch_hmlstm.py`, `jax_hmlstm.py`, checked against it in ``tests/benchmarks/``) and trains on the
same tokens.

Each measurement is a fresh process (`_own_process`): one implementation, its first step
(compilation included: numba kernels from a warm disk cache, XLA's compile, PyTorch's none), for
minflux's native form the steps until its native replays learned what to run at once, and for
every minflux step those until each of its split choices was made (`minflux_step`), then
``--steps`` timed steps, each with its wall and CPU time, then the step's peak memory (the process's
peak resident set during a step, reset through ``/proc/self/clear_refs``, minus its resident set
before it after ``malloc_trim``, plus the buffers a compiled step keeps for its intermediates).
Rounds alternate the implementations' order; the table gives medians over every round's steps.
In the one-core setting a process whose CPU time exceeds its wall time by more than 5% is marked
invalid.

    python benchmarks/hmlstm_step.py [--sizes small,default,ptb] [--rounds 3] [--steps 3]
        [--impls auto,compiled,native,torch,jax] [--layer-norm off,on] [--settings one,all]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _own_process import (WARMUP_CALLS, alternate, configure_torch, cores, cpu_wall_cell,  # noqa: E402
                          setting_label, settings_note, summarise, timed)

SIZES = {
    "small": dict(hidden=128, layers=2, embed=128, output_embed=None, batch=32, length=50,
                  cell_form="branch"),
    "default": dict(hidden=128, layers=3, embed=64, output_embed=256, batch=32, length=50,
                    cell_form="blend", layer_norm=True),
    "ptb": dict(hidden=512, layers=3, embed=128, output_embed=None, batch=64, length=100,
                cell_form="branch"),
}
VOCAB = 50
LR = 0.002


def build_model(size, layer_norm, mode="mixed"):
    import numpy as np

    from minflux_models import HMLSTM

    return HMLSTM(VOCAB, embed_size=size["embed"], hidden_sizes=(size["hidden"],) * size["layers"],
                  output_embed_size=size["output_embed"], layer_norm=layer_norm,
                  cell_form=size["cell_form"], mode=mode, rng=np.random.default_rng(0), dtype=np.float32)


def batch(size):
    import numpy as np

    tokens = np.random.default_rng(1).integers(0, VOCAB, size=(size["batch"], size["length"] + 1))
    return tokens[:, :-1], tokens[:, 1:]


def training_step(model, opt, x, y, state):
    import minflux as mf

    def loss_fn(m):
        logits, _, boundaries = m(x, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, VOCAB)), y.reshape(-1)), boundaries

    (_, boundaries), (grads,) = mf.withgradient(loss_fn, model)
    mf.optim.update(opt, model, grads)
    return boundaries


LEARN_MAX_STEPS = 30
"""Untimed steps at most until every split choice of a minflux step is made (`learn`)."""


def _choices_made_from_now() -> list:
    """Every `SplitChoice` made in this process from now on, in the list returned (a benchmark's
    view into the runtime: the class is wrapped)."""
    from minflux.runtime import split_choice

    made, init = [], split_choice.SplitChoice.__init__

    def noted(self, *args):
        init(self, *args)
        made.append(self)

    split_choice.SplitChoice.__init__ = noted
    return made


def minflux_step(size, layer_norm, mode, compiled=False, steady=False, native=True):
    """One minflux step; ``compiled``: the same function through `mf.compile` (recorded in the
    first step, replayed in the timed ones); ``steady``: in the form a run replays once compiled
    (the straight-line function with its buffers), compiled at the first replay instead, and with
    ``native`` (the default, as in a run) its native form, built at the second. ``step.learn()``
    steps until its kernels, cut products and native steps chose whether to run split: a choice
    measures only while the second core is free, so on a busy moment its measuring calls would
    spill into the timed steps (`minflux.runtime.split_choice`)."""
    import minflux as mf
    from minflux.runtime import native_runner, settings

    choices = _choices_made_from_now()

    settings.set("native_replay", native)
    if steady:
        import minflux.schedule.replay

        minflux.schedule.replay.COMPILE_AFTER = 0
        if native:
            native_runner.load_runner()   # from the disk cache; a run loads it on a thread of its own
    from minflux_models.boundaries import operations

    model = build_model(size, layer_norm, mode)
    opt = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(LR)), model)
    x, y = batch(size)
    state = model.initial_state(size["batch"])
    run = mf.compile(training_step) if compiled else training_step

    def step():
        step.boundaries = run(model, opt, x, y, state)

    def settle() -> float | None:
        """Step until a replay ran (fusion decides in the first calls), and for the native form until
        its steps of commands run at once learned whether that pays (`WARMUP_CALLS` native replays);
        the seconds of the call that made the kept recording, or None when it was an earlier one."""
        seconds = None
        while run.replays < (1 + WARMUP_CALLS if steady and native else 1):
            before, start = run.recordings, time.perf_counter()
            step()
            if run.recordings > before:
                seconds = time.perf_counter() - start
        return seconds

    def learn() -> None:
        for _ in range(LEARN_MAX_STEPS):
            if mf.get_num_threads() == 1 or all(c.splits is not None for c in choices):
                return
            step()

    step.learn = learn
    if compiled:
        step.settle = settle
        step.held_bytes = lambda: run.buffer_bytes
        step.compiled = run

    def copy_fraction() -> float:
        """The share of COPY operations in the layers above the first (zero initial z)."""
        return float((operations(step.boundaries)[..., 1:] == 0).mean())

    step.copy_fraction = copy_fraction
    return step


def torch_step(size, layer_norm):
    import torch

    from torch_hmlstm import TorchHMLSTM, make_step

    peer = TorchHMLSTM.from_minflux(build_model(size, layer_norm))
    x, y = (torch.from_numpy(a.copy()) for a in batch(size))
    return make_step(peer, x, y, lr=LR)


def jax_step(size, layer_norm):
    import jax
    import numpy as np

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
    "compiled": lambda size, ln: minflux_step(size, ln, "auto", compiled=True, steady=True, native=False),
    "native": lambda size, ln: minflux_step(size, ln, "auto", compiled=True, steady=True),
    "torch": torch_step,
    "jax": jax_step,
}
LABELS = {"auto": "minflux auto", "mixed": "minflux mixed", "reverse": "minflux reverse",
          "compiled": "minflux compiled (Python replay)", "native": "minflux compiled (native)",
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
    is what the step allocates at its high-water mark. Memory a step keeps for its intermediates
    between calls (``step.held_bytes()``: a compiled step's buffers) is live before it and counts as
    the step's."""
    import ctypes

    held = step.held_bytes() if hasattr(step, "held_bytes") else 0
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
        before = _rss_kib("VmRSS")
        step()
        return (_rss_kib("VmHWM") - before) * 1024 + held
    except (OSError, AttributeError):
        step()
        return None




def worker(setting: str, impl: str, size_name: str, layer_norm: str, steps: str) -> int:
    """One implementation in this process: first step, ``steps`` timed steps, peak memory (JSON)."""
    if impl == "torch":
        configure_torch(setting)
    size = SIZES[size_name]
    start = time.perf_counter()
    step = BUILDERS[impl](size, layer_norm == "on")
    step()
    first = time.perf_counter() - start
    result = {"first_step_s": first}
    if hasattr(step, "settle"):
        result["recording_s"] = step.settle() or first
    if hasattr(step, "learn"):
        step.learn()
    result.update(samples=timed(step, int(steps)), peak_bytes=peak_step_bytes(step))
    if hasattr(step, "copy_fraction"):
        result["copy_fraction"] = step.copy_fraction()
    print(json.dumps(result))
    return 0


def measure(setting, impls, size_name, layer_norm, rounds, steps) -> dict:
    """Every implementation in its own process per round, the order rotated each round."""
    results = {}
    for impl, outs in alternate(__file__, impls, [size_name, layer_norm, steps], setting, rounds).items():
        results[impl] = dict(
            summarise(outs), first_step_s=statistics.median(o["first_step_s"] for o in outs),
            peak_bytes=None if outs[0]["peak_bytes"] is None else max(o["peak_bytes"] for o in outs))
        if "copy_fraction" in outs[0]:
            results[impl]["copy_fraction"] = statistics.mean(o["copy_fraction"] for o in outs)
        if "recording_s" in outs[0]:
            results[impl]["recording_s"] = statistics.median(o["recording_s"] for o in outs)
    return results


def table(results: dict, rounds: int, steps: int, load: list) -> str:
    from _common import markdown_table

    rows, speedups = [], []
    for key, entry in results["cases"].items():
        for setting, by_impl in entry["settings"].items():
            for impl, r in by_impl.items():
                vs = [f"{r['tokens_per_s'] / by_impl[p]['tokens_per_s']:.2f}x" if p in by_impl else "n/a"
                      for p in ("torch", "jax")]
                peak = "n/a" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 2**20:.0f} MiB"
                first = f"{r['first_step_s']:.1f}" + (f" (recording {r['recording_s']:.2f})"
                                                       if "recording_s" in r else "")
                copying = f"{r['copy_fraction']:.0%}" if "copy_fraction" in r else ""
                rows.append([entry["size_name"], "on" if entry["layer_norm"] else "off",
                             setting_label(setting, results["cores"]), LABELS[impl], f"{r['seconds'] * 1e3:.0f}",
                             f"{r['tokens_per_s']:.0f}", *vs, cpu_wall_cell(r, setting), first, peak, copying])
        if set(entry["settings"]) == {"one", "all"}:
            one, every = entry["settings"]["one"], entry["settings"]["all"]
            speedups.append([entry["size_name"], "on" if entry["layer_norm"] else "off"] +
                            [f"{one[i]['seconds'] / every[i]['seconds']:.2f}x" if i in one and i in every
                             else "n/a" for i in results["impls"]])
    text = markdown_table(["size", "layer norm", "setting", "implementation", "ms / step", "tokens / s",
                           "vs PyTorch", "vs JAX", "CPU / wall", "first step (s)", "step peak memory",
                           "COPY rows (upper layers)"], rows)
    if speedups:
        text += "\nSpeed-up from one core to all cores (step time on one core / on all):\n\n"
        text += markdown_table(["size", "layer norm"] + [LABELS[i] for i in results["impls"]], speedups)
    text += (f"\nEach implementation in its own process, {rounds} rounds in rotated order, {steps} timed steps "
             f"per process after the first; medians over all steps. {settings_note(results['cores'])} "
             f"{results['versions']}. Load average (1 min) {load[0]:.1f} before and {load[1]:.1f} after. "
             "minflux skips the gate products of the rows that COPY (their share is the last column; "
             "the peers compute every row). minflux compiled is the same step through `mf.compile`: "
             "its timed steps are replays in the form a run reaches once compiled (the straight-line "
             "function writing into buffers allocated once, which its peak memory includes), compiled "
             "here at the first replay; (native) is the form a run reaches at the step after, where the kernels, "
             "products, arithmetic and copies the replay probed for run as native commands between the "
             "Python calls that remain, built here at the second replay (the default) and timed once its "
             f"first {WARMUP_CALLS} native replays learned which of its steps gain from running at once; "
             f"every minflux step is timed once its split choices are made (at most {LEARN_MAX_STEPS} untimed "
             "steps: a choice measures only while the second core is free); "
             "(Python replay) "
             "stays in the straight-line function (`MINFLUX_NATIVE_REPLAY=0`). The seconds of the call "
             "that recorded them follow the first step.\n")
    return text


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--worker":
        return worker(*sys.argv[2:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,default,ptb")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--impls", default="auto,compiled,native,torch,jax")
    parser.add_argument("--layer-norm", default="off,on", help="off, on or off,on (the default size is always on)")
    parser.add_argument("--settings", default="one,all")
    args = parser.parse_args(argv)
    impls = [i for i in args.impls.split(",")
             if i not in ("torch", "jax") or _importable(i)]
    from _common import library_versions, write_results

    load_before = os.getloadavg()
    results = {"impls": impls, "cores": cores(), "versions": library_versions(), "cases": {}}
    for size_name in args.sizes.split(","):
        size = SIZES[size_name]
        norms = ["on"] if size.get("layer_norm") else args.layer_norm.split(",")
        for ln in norms:
            key = size_name + ("_ln" if ln == "on" and "layer_norm" not in size else "")
            entry = results["cases"][key] = {"size_name": size_name, "size": size,
                                             "layer_norm": ln == "on", "settings": {}}
            for setting in args.settings.split(","):
                by_impl = measure(setting, impls, size_name, ln, args.rounds, args.steps)
                for impl, r in by_impl.items():
                    r["tokens_per_s"] = size["batch"] * size["length"] / r["seconds"]
                    print(f"{key} {setting} {impl}: {r['seconds'] * 1e3:.0f} ms, CPU/wall "
                          f"{r['cpu_per_wall']:.2f}", file=sys.stderr, flush=True)
                entry["settings"][setting] = by_impl
    load = [load_before[0], os.getloadavg()[0]]
    results["load_average_1min"] = load
    write_results("hmlstm_step", results, table(results, args.rounds, args.steps, load))
    return 0


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    sys.exit(main())
