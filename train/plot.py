"""Training and validation curves of a run as a PNG.

    python -m train.plot RUN_DIR [--out FILE]

Needs matplotlib (the optional ``plot`` extra: ``pip install 'minflux[plot]'``).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from minflux.files import atomic_path

from .cli import command, prog
from .metrics import MetricsLog

MISSING = ("{program} needs matplotlib, which is not installed. Install it with\n"
           "    pip install 'minflux[plot]'     (or: pip install matplotlib)\n"
           "The numbers themselves are in {metrics} (one JSON object per line).")


def curves(records: list[dict]) -> dict:
    """``{"train": (steps, bpc), "valid": ..., "lr": ..., "z": (steps, per-layer rates)}`` from metrics.

    The validation curve ends with the final whole-split validation of an ``end`` record.

    >>> curves([{"kind": "train", "step": 1, "bpc": 3.0, "lr": 0.1, "boundary_rates": [0.2]},
    ...         {"kind": "valid", "step": 1, "bpc": 2.5}, {"kind": "end", "step": 2, "valid_bpc": 2.4}])
    {'train': ([1], [3.0]), 'valid': ([1, 2], [2.5, 2.4]), 'lr': ([1], [0.1]), 'z': ([1], [[0.2]])}
    """
    out = {"train": ([], []), "valid": ([], []), "lr": ([], []), "z": ([], [])}
    for r in records:
        if r.get("kind") in ("train", "valid") and isinstance(r.get("bpc"), (int, float)):
            out[r["kind"]][0].append(r["step"])
            out[r["kind"]][1].append(r["bpc"])
        if r.get("kind") == "end" and isinstance(r.get("valid_bpc"), (int, float)):
            out["valid"][0].append(r["step"])
            out["valid"][1].append(r["valid_bpc"])
        if r.get("kind") == "train" and "lr" in r:
            out["lr"][0].append(r["step"])
            out["lr"][1].append(r["lr"])
        if r.get("kind") == "train" and r.get("boundary_rates"):
            out["z"][0].append(r["step"])
            out["z"][1].append(r["boundary_rates"])
    return out


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the curves of ``run_dir`` to ``out`` (default RUN_DIR/curves.png) and return its path."""
    run_dir = Path(run_dir)
    metrics = MetricsLog(run_dir / "metrics.jsonl")
    if not metrics.path.is_file():
        raise FileNotFoundError(f"{metrics.path} not found; is {run_dir} a run directory of python -m train?")
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(MISSING.format(program=prog("train.plot"), metrics=metrics.path)) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = curves(metrics.read())
    if metrics.skipped:
        print(f"warning: skipped {metrics.skipped} damaged line(s) of {metrics.path}", file=sys.stderr)
    if not data["train"][0] and not data["valid"][0]:
        raise FileNotFoundError(f"{metrics.path} holds no training records yet; plot the run once it "
                                "has logged a step")
    rows = 3 if data["z"][0] else 2
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2 + 2 * rows), sharex=True,
                             height_ratios=(3, 1, 1.5)[:rows])
    ax, ax_lr = axes[0], axes[1]
    ax.plot(*data["train"], label="train", alpha=0.7)
    ax.plot(*data["valid"], "o-", label="validation")
    ax.set_ylabel("bits per character")
    ax.set_title(run_dir.name)
    ax.grid(alpha=0.3)
    ax.legend()
    ax_lr.plot(*data["lr"], color="grey")
    ax_lr.set_yscale("log")
    ax_lr.set_ylabel("learning rate")
    ax_lr.grid(alpha=0.3)
    if rows == 3:
        steps, rates = data["z"]
        for layer, series in enumerate(zip(*rates)):
            axes[2].plot(steps, series, label=f"layer {layer + 1}")
        axes[2].set_ylabel("z = 1 rate")
        axes[2].set_ylim(0, 1)
        axes[2].grid(alpha=0.3)
        axes[2].legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    target = Path(out) if out else run_dir / "curves.png"
    try:
        with atomic_path(target) as tmp:
            fig.savefig(tmp, dpi=120, format=target.suffix.lstrip(".") or "png")
    finally:
        plt.close(fig)
    return target


@command
def main(argv: list[str] | None = None) -> int:
    """Command line: draw a run's curves; returns the exit status (1 without matplotlib)."""
    parser = argparse.ArgumentParser(prog=prog("train.plot"), description=__doc__.split("\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--out", default=None, help="PNG file to write (default RUN_DIR/curves.png)")
    args = parser.parse_args(argv)
    try:
        print(f"wrote {plot_run(args.run_dir, args.out)}")
    except (ImportError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
