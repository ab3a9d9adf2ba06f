"""``python -m train [--config F] [--set KEY=VALUE ...] [--out DIR] [--resume]``: run an experiment."""
from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import time
import traceback

from minflux import distributed

from .cli import EXPECTED, command, command_for, one_line, prog
from .config import load_config
from .data import DatasetNotFoundError
from .loop import start_run
from .progress import FILE_ONLY, configure_logging, remove_logging
from .runs import RunDir, RunError, latest_run_path, new_run_path
from .stopping import stop_summary

log = logging.getLogger("train")


def parse_args(argv=None) -> argparse.Namespace:
    """The command-line options of ``python -m train``."""
    parser = argparse.ArgumentParser(
        prog=prog("train"),
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
    """The config and run directory the arguments ask for (rank 0's choice, on every rank)."""
    if distributed.size() > 1 and args.out is None:
        args.out = distributed.broadcast_object(_default_out(args) if distributed.is_main() else None)
    return _resolve(args)


def _default_out(args):
    try:
        return _resolve(args)[1].path
    except EXPECTED:
        return None  # every rank then meets the same error in _resolve


def _resolve(args):
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


def set_keys(overrides: list[str]) -> list[str]:
    """The dotted keys that ``--set KEY=VALUE`` options name.

    >>> set_keys(["optim.lr=0.001", "train.max_steps = 5"])
    ['optim.lr', 'train.max_steps']
    """
    return [text.partition("=")[0].strip() for text in overrides]


@command
def main(argv=None) -> int:
    """``python -m train``: returns 0 when done, 1 on an error, 130 when interrupted.

    Under ``mpiexec -n N`` every rank runs this; an error or interrupt on any rank ends the whole
    job (the others would otherwise wait for it in their next collective).
    """
    distributed.init()
    try:
        status = _main(argv)
    except BaseException as exc:
        if distributed.size() > 1:
            if isinstance(exc, EXPECTED + (KeyboardInterrupt,)):
                _say(f"error: {one_line(exc)}" if isinstance(exc, EXPECTED) else "interrupted",
                     file=sys.stderr)
            else:
                traceback.print_exc()
            _say(f"ending all {distributed.size()} ranks", file=sys.stderr)
            distributed.abort(130 if isinstance(exc, KeyboardInterrupt) else 1)
        raise
    finally:
        remove_logging()
    if status == 1 and distributed.size() > 1:
        distributed.abort(status)  # an error on this rank: the others may be waiting for it
    return status


def _say(*args, **kwargs) -> None:
    """print on rank 0 (errors print on every rank that has them, named by rank)."""
    if kwargs.get("file") is sys.stderr and distributed.size() > 1:
        args = (f"[rank {distributed.rank()}]", *args)
    elif not distributed.is_main():
        return
    stream = kwargs.get("file") or sys.stdout
    stream.write(" ".join(map(str, args)) + "\n")  # one write: an abort cannot cut the line short
    stream.flush()


def _main(argv=None) -> int:
    args = parse_args(argv)
    run = None
    try:
        main_rank = distributed.is_main()
        level = logging.WARNING if args.quiet or not main_rank else logging.INFO
        configure_logging(None, level)
        cfg, run = resolve(args)
        source = "" if args.resume else f"from {args.config}" + "".join(f" --set {o}" for o in args.overrides)
        with run.locked() if main_rank else contextlib.nullcontext():
            trainer = start_run(cfg, run, args.resume, set_keys(args.overrides), source)
            if main_rank:
                configure_logging(run.log, level)
            started = time.perf_counter()
            outcome = trainer.fit()
    except DatasetNotFoundError:
        raise
    except EXPECTED as exc:
        log.error("error: %s", one_line(exc), extra=FILE_ONLY)  # a diverged run's reason, in train.log
        _say(f"error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if distributed.size() > 1:
            raise  # main() ends every rank
        if run is None or not run.latest.is_file():
            report("\naborted before the first checkpoint; nothing was saved", sys.stderr)
            return 130
        report(f"\naborted without saving the last steps; the last checkpoint is {run.latest} "
               f"(continue with: {command_for('train')} --out {run} --resume)", sys.stderr)
        return 130
    report(summary(outcome, cfg, time.perf_counter() - started))
    return 130 if outcome.stopped == "interrupted" else 0


def report(text: str, stream=None) -> None:
    """Print ``text`` on rank 0 (to stdout unless ``stream``) and write it to the run's train.log."""
    _say(text, file=stream or sys.stdout)
    for line in filter(str.strip, text.splitlines()):
        log.info(line, extra=FILE_ONLY)


def summary(outcome, cfg, took: float) -> str:
    """What the run reached, why it stopped and how to continue, the sample, and the next commands."""
    p, run = outcome.position, outcome.run
    stopped = stop_summary(outcome.stopped, outcome.budget, p.step, p.epoch, outcome.session_steps,
                           outcome.elapsed, run, command_for("train"))
    evaluate, sample = command_for("train.evaluate"), command_for("train.sample")
    lines = [""]
    if outcome.valid is not None and outcome.recorded:
        lines.append(f"validation: {outcome.valid} [step {p.step:,}, recorded when the run finished; "
                     f"{evaluate} {run} validates again]")
    elif outcome.valid is not None:
        lines.append(f"validation: {outcome.valid} [step {p.step:,}, {took / 60:.1f} min this session]")
        if outcome.best_bpc is not None and outcome.best_bpc < outcome.valid.bpc:
            lines.append(f"best validation: {outcome.best_bpc:.4f} bits per character ({run.best})")
    lines += stopped
    if outcome.stopped == "interrupted":
        return "\n".join(lines)
    heading = (f"sample ({run.sample}, saved when the run finished):" if outcome.recorded else
               f"sample (temperature {cfg.sample.temperature}):")
    lines += ["", heading, cfg.sample.prime + outcome.sample, "",
              f"run files: {run}/ (config.toml, metrics.jsonl, train.log, sample.txt, checkpoints/best.h5, "
              "checkpoints/latest.h5)",
              f"next: {evaluate} {run} --split test | {sample} {run} --prime \"...\"\n"
              f"      {command_for('train.boundaries')} {run} --text \"...\" | "
              f"{command_for('train.plot')} {run}"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
