"""Progress bars and log handlers for the command-line tools (the only place handlers are set up).

tqdm bars switch themselves off when the output is not a terminal; log lines go through
``tqdm.write`` so they do not tear a bar apart.
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from tqdm import tqdm

from minflux.files import write_atomically


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
