"""Progress bars and log handlers for the command-line tools (the only place handlers are set up).

tqdm bars switch themselves off when the output is not a terminal; log lines go through
``tqdm.write`` so they do not tear a bar apart. A record logged with ``extra=FILE_ONLY`` goes to the
log file but not to the console (the progress lines a bar already shows, the final summary that
is printed on stdout).
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from tqdm import tqdm

from minflux.files import write_atomically


FILE_ONLY = {"file_only": True}


def progress_line(step: int, total: int, epoch: int, summary: dict, lr: float, elapsed: float,
                  remaining: float) -> str:
    """One plain progress line: what the bar shows, for logs without a terminal.

    ``summary`` holds the means since the last line (``loss``, ``bpc``, ``chars_per_s`` and the
    per-layer ``boundary_rates``); ``elapsed`` and ``remaining`` are seconds.

    >>> progress_line(120, 1500, 0, dict(loss=2.1, bpc=3.03, chars_per_s=9100.0, boundary_rates=[0.8, 0.2]),
    ...               0.002, 30.0, 345.0)
    'step 120/1,500 (8%) epoch 0 | loss 2.100 bpc 3.030 | 9,100 char/s | z 0.80/0.20 | lr 0.002 | 00:30 elapsed, ~05:45 left'
    """
    z = summary.get("boundary_rates")
    return " | ".join([
        f"step {step:,}/{total:,} ({100 * step / max(total, 1):.0f}%) epoch {epoch}",
        f"loss {summary['loss']:.3f} bpc {summary['bpc']:.3f}",
        f"{summary['chars_per_s']:,.0f} char/s",
        *([f"z {'/'.join(f'{r:.2f}' for r in z)}"] if z else []),
        f"lr {lr:.3g}",
        f"{tqdm.format_interval(elapsed)} elapsed, ~{tqdm.format_interval(max(remaining, 0.0))} left",
    ])


def progress_bar(**kwargs) -> tqdm:
    """A tqdm bar on stderr that is disabled when stderr is not a terminal.

    >>> with progress_bar(total=3) as bar:
    ...     bar.update(3)
    """
    kwargs.setdefault("file", sys.stderr)
    kwargs.setdefault("dynamic_ncols", True)
    kwargs.setdefault("disable", None)  # None: off when not a TTY
    kwargs.setdefault("leave", True)
    return tqdm(**kwargs)


class _TqdmHandler(logging.StreamHandler):
    def emit(self, record):
        if getattr(record, "file_only", False):
            return
        try:
            tqdm.write(self.format(record), file=sys.stderr)
        except Exception:  # pragma: no cover - logging must never raise
            self.handleError(record)


def configure_logging(log_file: str | Path | None = None, level: int = logging.INFO) -> None:
    """Log ``level`` and above to stderr (through tqdm) and everything to ``log_file``.

    Replaces handlers this function installed before, so repeated runs in one process do not
    duplicate lines.
    """
    remove_logging()
    root = logging.getLogger()
    console = _TqdmHandler()
    console.setFormatter(logging.Formatter("%(message)s"))
    console.setLevel(level)
    handlers = [console]
    if log_file is not None:
        if not Path(log_file).is_file():
            write_atomically(log_file, "")  # created 0644 whatever the umask
        file = logging.FileHandler(log_file, encoding="utf-8")
        file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        file.setLevel(logging.DEBUG)
        handlers.append(file)
    for handler in handlers:
        handler._minflux_train = True
        root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))


def remove_logging() -> None:
    """Remove (and close) the handlers `configure_logging` installed.

    >>> configure_logging(); remove_logging()
    >>> any(getattr(h, "_minflux_train", False) for h in logging.getLogger().handlers)
    False
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_minflux_train", False):
            root.removeHandler(handler)
            handler.close()
