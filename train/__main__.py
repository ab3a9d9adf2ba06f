"""``python -m train [--config F] [--set KEY=VALUE ...] [--out DIR] [--resume]``: run an experiment."""
from __future__ import annotations

import argparse
import logging
import sys
import time

from .config import ConfigError, load_config
from .data import DatasetNotFoundError
from .loop import Trainer, TrainingDiverged, prepare_run
from .progress import configure_logging, remove_logging
from .runs import RunDir, RunError, latest_run_path, new_run_path

log = logging.getLogger("train")


def parse_args(argv=None) -> argparse.Namespace:
    """The command-line options of ``python -m train``."""
    parser = argparse.ArgumentParser(
        prog="python -m train",
        description="Train a character language model from a TOML config (default: configs/default.toml).")
    parser.add_argument("--config", default="default",
                        help="a TOML file, or the name of one in configs/ (default: default)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config value, e.g. --set optim.lr=0.001 (repeatable)")
    parser.add_argument("--out", default=None, help="run directory (default: runs/<name>-<date>-<time>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out (default: the newest run of this config)")
    parser.add_argument("--quiet", action="store_true", help="log warnings only")
    return parser.parse_args(argv)


def resolve(args):
    """The config and run directory the arguments ask for."""
    if args.resume:
        if args.out is None:
            cfg = load_config(args.config, args.overrides)
            found = latest_run_path(cfg)
            if found is None:
                raise RunError(f"--resume: no run of config {cfg.name!r} under runs/; name one with --out")
            args.out = found
        run = RunDir(args.out)
        if not run.config.is_file():
            raise RunError(f"--resume: {run} has no config.toml; is it a run directory?")
        return load_config(run.config, args.overrides), run
    cfg = load_config(args.config, args.overrides)
    return cfg, RunDir(args.out or new_run_path(cfg))


def main(argv=None) -> int:
    """``python -m train``: returns 0 when done, 1 on an error, 130 when interrupted."""
    try:
        return _main(argv)
    finally:
        remove_logging()


def _main(argv=None) -> int:
    args = parse_args(argv)
    run = None
    try:
        level = logging.WARNING if args.quiet else logging.INFO
        configure_logging(None, level)
        cfg, run = resolve(args)
        trainer = Trainer(cfg, run, args.resume)  # reads the data and builds the model first
        prepare_run(cfg, run, args.resume)
        configure_logging(run.log, level)
        started = time.perf_counter()
        outcome = trainer.fit()
    except (ConfigError, DatasetNotFoundError, RunError, TrainingDiverged) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if run is None:
            return 130
        print(f"\naborted without saving; the last checkpoint is in {run.checkpoints} "
              f"(continue with: python -m train --out {run} --resume)", file=sys.stderr)
        return 130
    took = time.perf_counter() - started
    p = outcome.position
    if outcome.stopped == "interrupted":
        print(f"stopped at step {p.step} (epoch {p.epoch}); continue with:\n"
              f"    python -m train --out {run} --resume")
        return 130
    print(f"\nvalidation: {outcome.valid} [step {p.step}, {took / 60:.1f} min this session]")
    if outcome.best_bpc is not None and outcome.best_bpc < outcome.valid.bpc:
        print(f"best validation: {outcome.best_bpc:.4f} bits per character ({run.best})")
    print(f"\nsample (temperature {cfg.sample.temperature}):")
    print(cfg.sample.prime + outcome.sample)
    print(f"\nrun files: {run}/ (config.toml, metrics.jsonl, train.log, sample.txt, checkpoints/best.h5, "
          f"checkpoints/latest.h5)")
    print(f"next: python -m train.evaluate {run} --split test | python -m train.sample {run} --prime \"...\"\n"
          f"      python -m train.boundaries {run} --text \"...\" | python -m train.plot {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
