"""The learning rate of every step: ``optim.schedule`` after ``optim.warmup_steps`` of linear warm-up.

`LearningRate` builds the schedule a config names from `minflux.optim`'s (`ReduceOnPlateau`,
`CosineDecay`, `StepDecay`, `ExponentialDecay`, `OneCycle`, each behind a `LinearWarmup`), gives the
rate of step ``t`` (``t`` steps taken before it) and is told each validation result. Its state is one
JSON-able dict for the checkpoint, so a resumed run continues the same rates: the span of a cosine or
one-cycle schedule is fixed when the run starts (``optim.decay_steps``, or the step limit then).

The warm-up rises linearly from ``lr / (N + 1)`` to the schedule's rate over the first N steps, so no
step has rate 0; the schedule itself starts after them (its step 0 is step N of the run).

>>> from minflux_train.config import OptimConfig
>>> rates = LearningRate(OptimConfig(lr=1.0, schedule="cosine", warmup_steps=3), steps=7)
>>> [round(rates.rate(t), 3) for t in range(8)]
[0.25, 0.5, 0.75, 1.0, 0.854, 0.5, 0.146, 0.0]
"""
from __future__ import annotations

import minflux as mf

PER_VALIDATION = ("plateau", "constant")  # schedules whose rate changes at validations only (or never)


def _decay(o, span: int):
    """The schedule that follows the warm-up (None for plateau and constant)."""
    if o.schedule == "cosine":
        return mf.optim.CosineDecay(lr=o.lr, total=span, lr_min=o.min_lr)
    if o.schedule == "step":
        return mf.optim.StepDecay(lr=o.lr, step_size=o.decay_every, gamma=o.decay_factor)
    if o.schedule == "exponential":
        return mf.optim.ExponentialDecay(lr=o.lr, gamma=o.decay_factor ** (1.0 / o.decay_every),
                                         lr_min=o.min_lr)
    if o.schedule == "one_cycle":
        return mf.optim.OneCycle(lr=o.lr, total=max(span, 2), pct_start=o.one_cycle_rise)
    return None


class LearningRate:
    """The rates ``optim`` (an `OptimConfig`) describes for a run of ``steps`` steps.

    ``rate(t)`` is the rate of the step after ``t`` steps; ``validated(bpc)`` tells it a validation
    result and returns the new rate when the plateau rule lowered it (else None).

    >>> from minflux_train.config import OptimConfig
    >>> plateau = LearningRate(OptimConfig(lr=1.0, plateau_factor=10, plateau_patience=0), steps=100)
    >>> plateau.validated(2.0), plateau.validated(2.5), plateau.rate(50)
    (None, 0.1, 0.1)
    >>> step = LearningRate(OptimConfig(lr=1.0, schedule="step", decay_every=2, min_lr=0.2), steps=9)
    >>> [step.rate(t) for t in range(6)]
    [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
    """

    def __init__(self, optim, steps: int):
        self.kind, self.min_lr = optim.schedule, optim.min_lr
        warmup = optim.warmup_steps
        self.plateau = None
        if self.kind == "plateau":
            self.plateau = mf.optim.ReduceOnPlateau(lr=optim.lr, factor=1.0 / optim.plateau_factor,
                                                    patience=optim.plateau_patience, lr_min=optim.min_lr)
        span = optim.decay_steps or max(steps - warmup, 1)
        base = 1.0 if self.plateau else optim.lr  # the plateau's own rate scales a warm-up factor
        self.curve = mf.optim.LinearWarmup(lr=base, warmup=warmup, start_factor=1.0 / (warmup + 1),
                                           after=None if self.plateau else _decay(optim, span))

    @property
    def per_step(self) -> bool:
        """Whether the rate may change between two validations (a warm-up or a schedule of steps): then
        it comes to the compiled step as data (`train.step.rate_as_data`), not as a number."""
        return self.kind not in PER_VALIDATION or self.curve.warmup > 0

    @property
    def lr(self) -> float:
        """The schedule's rate without warm-up: the plateau's current rate, else the peak ``optim.lr``."""
        return self.plateau.lr if self.plateau else self.curve.lr

    def rate(self, t: int) -> float:
        """The learning rate of the step after ``t`` steps."""
        if self.plateau:
            return self.plateau.lr * self.curve(t)
        rate = self.curve(t)
        return max(rate, self.min_lr) if self.kind == "step" and t >= self.curve.warmup else rate

    def validated(self, bpc: float) -> float | None:
        """Tell the schedule a validation result: the new rate when the plateau rule lowered it."""
        if not self.plateau:
            return None
        old = self.plateau.lr
        new = self.plateau.step(bpc)
        return new if new != old else None

    def set_lr(self, lr: float) -> None:
        """Start again from peak rate ``lr`` (``--resume --set optim.lr=...``): the plateau's rate (and
        its count of bad validations), or the base rate of every other schedule."""
        if self.plateau:
            self.plateau.lr, self.plateau.bad_steps = lr, 0
            return
        self.curve.lr = lr
        if self.curve.after is not None:
            self.curve.after.lr = lr

    def resumed_with(self, optim) -> None:
        """Apply the keys of ``optim`` that may change on resume and do not restart the rate."""
        self.min_lr = optim.min_lr
        if self.plateau:
            self.plateau.factor = 1.0 / optim.plateau_factor
            self.plateau.patience, self.plateau.lr_min = optim.plateau_patience, optim.min_lr
        elif hasattr(self.curve.after, "lr_min"):
            self.curve.after.lr_min = optim.min_lr

    def state_dict(self) -> dict:
        """The checkpoint's ``schedule`` entry: the plateau rule's fields (as before schedules were
        configurable), or ``{"kind": ..., **the warm-up and schedule's fields}``."""
        if self.plateau:
            return self.plateau.state_dict()
        return {"kind": self.kind, **self.curve.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Restore `state_dict`; a checkpoint of another schedule is a `ValueError` naming both."""
        state = dict(state)
        saved = state.pop("kind", "plateau")
        if saved != self.kind:
            raise ValueError(f"the checkpoint's learning-rate schedule is {saved!r}, the config's "
                             f"optim.schedule {self.kind!r}")
        (self.plateau or self.curve).load_state_dict(state)
