"""What the command-line tools share: expected errors as one line on stderr and an exit status.

An expected error (a wrong config, a missing or damaged run or checkpoint, text outside the
vocabulary, a full disk, a diverged run) prints ``error: <what is wrong and how to fix it>`` and exits
with status 1; Ctrl-C exits with 130. Anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import functools
import os
import sys

import minflux as mf
from minflux.files import FileWriteError
from minflux.io import CheckpointError, CheckpointMismatch

from .config import ConfigError
from .data import DatasetNotFoundError
from .divergence import TrainingDiverged
from .runs import RunError

EXPECTED = (ConfigError, RunError, CheckpointError, DatasetNotFoundError, FileWriteError, TrainingDiverged,
            mf.ReplayMismatch)


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (a list of checkpoint mismatches shows its first entry).

    >>> one_line(CheckpointMismatch("c.h5 does not match (2 problems):\\n  - model array W: ...\\n  - b"))
    'c.h5 does not match (2 problems); first: model array W: ...'
    """
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line[2:] if line.startswith("- ") else line for line in lines]
    if not lines:
        return type(exc).__name__
    if isinstance(exc, CheckpointMismatch) and len(lines) > 1:
        return f"{lines[0].rstrip(':')}; first: {lines[1]}"
    return "; ".join(lines)


_PACKAGE = __name__.rpartition(".")[0]  # train from a checkout's python -m train, else minflux_train


SCRIPTS = {"train": "minflux-train", "train.evaluate": "minflux-evaluate", "train.sample": "minflux-sample",
           "train.boundaries": "minflux-boundaries", "train.plot": "minflux-plot"}  # pyproject.toml's


def command_for(module: str) -> str:
    """How to start tool ``module`` (``train``, ``train.evaluate``, ...) the way this process was
    started, for the commands a tool prints: the console script of that tool when this process is one
    of them (``minflux-train`` prints ``minflux-evaluate ...``), else ``python -m`` with ``train``
    spelt as this process imported the package.

    >>> import sys
    >>> started_as, sys.argv[0] = sys.argv[0], "/home/me/.venv/bin/minflux-train"
    >>> command_for("train"), command_for("train.evaluate")
    ('minflux-train', 'minflux-evaluate')
    >>> sys.argv[0] = "/home/me/minflux/train/__main__.py"
    >>> command_for("train.sample") in ("python -m train.sample", "python -m minflux_train.sample")
    True
    >>> sys.argv[0] = started_as
    """
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if name in SCRIPTS.values() and module in SCRIPTS:
        return SCRIPTS[module]
    return f"python -m {_PACKAGE}{module.removeprefix('train')}"


def prog(module: str) -> str:
    """The program name for help texts: the console script's name, or ``python -m <module>`` with
    ``train`` spelt as this process imported the package (``minflux_train`` when installed).

    >>> prog("train.sample") in ("python -m train.sample", "python -m minflux_train.sample")
    True
    """
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name.startswith("minflux-") else f"python -m {_PACKAGE}{module.removeprefix('train')}"


def command(main):
    """Decorate a tool's ``main(argv) -> int`` so expected errors become one line and status 1.

    >>> @command
    ... def main(argv=None):
    ...     raise RunError("no run directory runs/x")
    >>> main([])
    1
    """
    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        try:
            return main(argv)
        except DatasetNotFoundError as exc:  # its message lists where it looked, one place a line
            print(f"error: {exc}", file=sys.stderr)
            return 1
        except EXPECTED as exc:
            print(f"error: {one_line(exc)}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return 130
    return wrapper
