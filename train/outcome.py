"""What a run is at and what training returns: `Position` (steps taken, the next window) and `Outcome`.

>>> Position(step=3).window, Outcome(run="runs/x", stopped="max_steps", position=Position(3)).valid is None
(0, True)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .evaluate import Evaluation
from .runs import RunDir
from .stopping import Budget


@dataclass
class Position:
    """Where training stands: steps taken, and the next window to read."""

    step: int = 0
    epoch: int = 0
    window: int = 0


@dataclass
class Outcome:
    """What `train` returns: why it stopped, the last validation, and the run's files."""

    run: RunDir
    stopped: str                      # a key of train.stopping.STOP_REASONS
    position: Position
    budget: Budget | None = None      # the limits it trained to
    session_steps: int = 0            # steps taken by this call (0: a resumed run had nothing left)
    elapsed: float = 0.0              # seconds of training over all sessions of the run
    valid: Evaluation | None = None
    best_bpc: float | None = None
    sample: str = ""
    history: list = field(default_factory=list)
    recorded: bool = False            # valid and sample are those the run recorded when it finished
