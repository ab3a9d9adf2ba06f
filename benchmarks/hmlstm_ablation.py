"""What each part of minflux's HM-LSTM step is worth: forward + gradient of the benchmark model at fixed
weights (so every variant sees the same boundaries), with one part switched off at a time, timed in
turns in one process.

The parts: the weight gradients of all steps formed as one stacked product per weight
(`minflux.product_gradient`), the gate products of COPY rows skipped (`minflux.row_masked_matmul`), and
`mf.layer_norm`'s compiled row kernels. Switching a part off restores the computation it replaced:
one ``a.T @ g`` product per step, every row's gates, numpy's layer-norm formula.

    python benchmarks/hmlstm_ablation.py [--sizes small,ptb] [--repeats 5]
"""
from __future__ import annotations

import os

for _var in ("MINFLUX_NUM_THREADS", "NUMBA_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
             "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import minflux as mf  # noqa: E402
import minflux.ops.linalg as linalg  # noqa: E402
import minflux.ops.row_masking as row_masking  # noqa: E402
from _common import markdown_table, write_results  # noqa: E402
from hmlstm_step import SIZES, VOCAB, batch, build_model  # noqa: E402
from minflux.ops import normalisation  # noqa: E402
from minflux.product_gradient import ProductGradient  # noqa: E402

PARTS = {
    "stacked weight gradients": (linalg, "ProductGradient", ProductGradient, lambda a, g: a.T @ g),
    "COPY rows skipped": (row_masking, "SKIP_MIN_FRACTION", row_masking.SKIP_MIN_FRACTION, 2.0),
    "layer-norm row kernels": (normalisation, "_compiled_rows", normalisation._compiled_rows,
                               lambda *arrays: False),
}
VARIANTS = ["everything"] + [f"without {part}" for part in PARTS] + ["without all three"]


def configure(variant: str) -> None:
    for part, (module, name, on, off) in PARTS.items():
        disabled = variant == "without all three" or variant == f"without {part}"
        setattr(module, name, off if disabled else on)


def gradient_time(size, layer_norm, repeats) -> dict:
    model = build_model(size, layer_norm)
    x, y = batch(size)
    state = model.initial_state(size["batch"])

    def loss(m):
        logits, _, _ = m(x, state)
        return mf.cross_entropy(mf.reshape(logits, (-1, VOCAB)), y.reshape(-1))

    times = {v: [] for v in VARIANTS}
    for variant in VARIANTS:
        configure(variant)
        mf.gradient(loss, model)
    for _ in range(repeats):
        for variant in VARIANTS:
            configure(variant)
            start = time.perf_counter()
            mf.gradient(loss, model)
            times[variant].append(time.perf_counter() - start)
    configure("everything")
    return {v: statistics.median(t) for v, t in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,ptb")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    results, columns = {}, []
    for name in args.sizes.split(","):
        for layer_norm in (False, True):
            key = f"{name}{' + LN' if layer_norm else ''}"
            results[key] = gradient_time(SIZES[name], layer_norm, args.repeats)
            columns.append(key)
            print(key, {v: f"{s * 1e3:.0f} ms" for v, s in results[key].items()}, file=sys.stderr)
    rows = []
    for variant in VARIANTS:
        cells = []
        for key in columns:
            seconds, base = results[key][variant], results[key]["everything"]
            cells.append(f"{seconds * 1e3:.0f}" + ("" if variant == "everything" else f" ({seconds / base:.2f}x)"))
        rows.append([variant, *cells])
    table = ("Forward + gradient of the `hmlstm_step` models at fixed weights, ms, median of "
             f"{args.repeats} rounds in turns, one thread (`python benchmarks/hmlstm_ablation.py`); in "
             "parentheses the time over \"everything\". COPY rows are skipped only without layer norm and the "
             "row kernels run only with it, so those two cells show the run's noise.\n\n")
    table += markdown_table(["variant", *columns], rows)
    write_results("hmlstm_ablation", results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
