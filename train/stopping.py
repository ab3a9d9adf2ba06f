"""When a run stops, why it stopped, and how to continue it.

A run trains to a step limit, the smaller of ``train.epochs`` times the windows per epoch and
``train.max_steps`` (when set): the same command and seed take the same steps and reach the same
result on a loaded machine as on an idle one. ``train.max_minutes`` adds a time budget, which stops
the run earlier on a slower or busier machine.

>>> b = Budget.of(epochs=10, max_steps=1500, max_minutes=0.0, windows_per_epoch=262)
>>> b.steps, b.key, b.describe()
(1500, 'train.max_steps', 'to step 1,500 (train.max_steps; 5.7 epochs of 262 windows)')
"""
from __future__ import annotations

import math
from dataclasses import dataclass

# why fit returned: Outcome.stopped and the "stopped" field of the "end" record in metrics.jsonl
STOP_REASONS = {
    "max_steps": "reached the step limit",
    "epochs": "finished its epochs",
    "time": "used up its time budget",
    "early_stopping": "stopped improving (train.early_stopping)",
    "interrupted": "was interrupted",
}


@dataclass(frozen=True)
class Budget:
    """How far a run trains: to step ``steps`` (set by config ``key``), or for ``seconds`` of training,
    or until ``patience`` validations in a row have not improved (0: no such limit).

    ``seconds`` is ``math.inf`` without a time budget; training time is counted over all sessions.
    """

    steps: int
    key: str
    seconds: float
    windows_per_epoch: int
    patience: int = 0

    @classmethod
    def of(cls, *, epochs: int, max_steps: int, max_minutes: float, windows_per_epoch: int,
           early_stopping: int = 0) -> "Budget":
        """The budget the ``train.epochs``, ``train.max_steps``, ``train.max_minutes`` and
        ``train.early_stopping`` keys set."""
        total = epochs * windows_per_epoch
        seconds = max_minutes * 60 or math.inf
        if max_steps and max_steps <= total:
            return cls(max_steps, "train.max_steps", seconds, windows_per_epoch, early_stopping)
        return cls(total, "train.epochs", seconds, windows_per_epoch, early_stopping)

    @property
    def stop_reason(self) -> str:
        """What `Outcome.stopped` says when the run reaches ``steps``."""
        return "max_steps" if self.key == "train.max_steps" else "epochs"

    def describe(self) -> str:
        """The budget in words, for the first log line of a session.

        >>> Budget.of(epochs=2, max_steps=0, max_minutes=5.0, windows_per_epoch=10).describe()
        'to step 20 (train.epochs = 2) or for 5 min of training (train.max_minutes), whichever comes first'
        """
        if self.key == "train.max_steps":
            text = (f"to step {self.steps:,} (train.max_steps; {self.steps / self.windows_per_epoch:.1f} "
                    f"epochs of {self.windows_per_epoch:,} windows)")
        else:
            text = f"to step {self.steps:,} (train.epochs = {self.steps // self.windows_per_epoch})"
        if math.isfinite(self.seconds):
            text += (f" or for {self.seconds / 60:g} min of training (train.max_minutes), whichever comes "
                     "first")
        if self.patience:
            text += (f", unless {self.patience} validation{'s' if self.patience > 1 else ''} in a row do "
                     "not improve (train.early_stopping)")
        return text

    def projected_steps(self, step: int, elapsed: float, session_steps: int, session_seconds: float) -> int:
        """The step the run will stop at: ``steps``, or earlier where the time budget runs out first at
        the speed of this session so far (``session_steps`` in ``session_seconds``).

        >>> b = Budget.of(epochs=100, max_steps=0, max_minutes=1.0, windows_per_epoch=10)
        >>> b.projected_steps(step=10, elapsed=20.0, session_steps=10, session_seconds=20.0)
        30
        >>> Budget.of(epochs=1, max_steps=0, max_minutes=0.0, windows_per_epoch=10).projected_steps(1, 1.0, 1, 1.0)
        10
        """
        if not math.isfinite(self.seconds) or session_steps == 0 or session_seconds <= 0:
            return self.steps
        more = max(self.seconds - elapsed, 0.0) * session_steps / session_seconds
        return min(self.steps, step + math.ceil(more))


def continue_hint(stopped: str, budget: Budget, step: int, elapsed: float, run,
                  program: str = "python -m train") -> str:
    """How to train the stopped run further: which key to raise, as a command to paste (``program``
    is how the training program is started, `train.cli.command_for`).

    >>> b = Budget.of(epochs=10, max_steps=1500, max_minutes=0.0, windows_per_epoch=262)
    >>> continue_hint("max_steps", b, 1500, 300.0, "runs/x")
    'to train further, raise train.max_steps: python -m train --out runs/x --resume --set train.max_steps=3000'
    >>> continue_hint("interrupted", b, 700, 200.0, "runs/x", program="minflux-train")
    'continue with: minflux-train --out runs/x --resume'
    """
    resume = f"{program} --out {run} --resume"
    if stopped == "interrupted":
        return f"continue with: {resume}"
    if stopped == "early_stopping":
        return (f"to train further, raise train.early_stopping (0: off): {resume} --set "
                f"train.early_stopping={2 * budget.patience}")
    if stopped == "time":
        minutes = math.ceil(2 * max(budget.seconds, elapsed) / 60)
        return f"to train further, raise train.max_minutes: {resume} --set train.max_minutes={minutes}"
    if stopped == "max_steps":
        return f"to train further, raise train.max_steps: {resume} --set train.max_steps={2 * step}"
    epochs = 2 * max(budget.steps // budget.windows_per_epoch, 1)
    return f"to train further, raise train.epochs: {resume} --set train.epochs={epochs}"


def stop_summary(stopped: str, budget: Budget, step: int, epoch: int, session_steps: int, elapsed: float,
                 run, program: str = "python -m train") -> list[str]:
    """Lines that say why the run stopped and how to continue it.

    A resumed run that had already reached its budget (no step this session) says so, and which
    key to raise.

    >>> b = Budget.of(epochs=10, max_steps=100, max_minutes=0.0, windows_per_epoch=30)
    >>> print("\\n".join(stop_summary("max_steps", b, 100, 3, 0, 60.0, "runs/x")))
    stopped: nothing to train, the run had already reached train.max_steps = 100 (step 100, epoch 3)
    to train further, raise train.max_steps: python -m train --out runs/x --resume --set train.max_steps=200
    """
    where = f"step {step:,}, epoch {epoch}"
    took = f"{elapsed / 60:.1f} min of training in all"
    patience = (f"{budget.patience} validation{'s' if budget.patience > 1 else ''} in a row without "
                f"improvement (train.early_stopping = {budget.patience})")
    if stopped == "interrupted":
        why = f"stopped: the run was interrupted at {where} ({took}); its checkpoint is saved"
    elif session_steps == 0:
        limit = {"time": f"its time budget train.max_minutes = {budget.seconds / 60:g}",
                 "max_steps": f"train.max_steps = {budget.steps:,}",
                 "epochs": f"train.epochs = {budget.steps // budget.windows_per_epoch}",
                 "early_stopping": f"its early stop after {patience}"}[stopped]
        why = f"stopped: nothing to train, the run had already reached {limit} ({where})"
    elif stopped == "early_stopping":
        why = f"stopped early: {patience} at {where} ({took}; the step limit was {budget.steps:,})"
    elif stopped == "time":
        why = (f"stopped: used up the time budget train.max_minutes = {budget.seconds / 60:g} at {where} "
               f"({took}; the step limit was {budget.steps:,})")
    elif stopped == "max_steps":
        why = f"stopped: reached the step limit train.max_steps = {budget.steps:,} ({where}, {took})"
    else:
        why = (f"stopped: finished train.epochs = {budget.steps // budget.windows_per_epoch} at {where} "
               f"({took})")
    return [why, continue_hint(stopped, budget, step, elapsed, run, program)]
