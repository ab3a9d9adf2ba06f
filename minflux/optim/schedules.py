"""Learning-rate schedules: plain objects a training loop asks for the rate, then `optim.adjust`.

``StepDecay``, ``ExponentialDecay``, ``CosineDecay``, ``LinearWarmup`` and ``OneCycle`` are functions
of the step (``schedule(t)``);
``ReduceOnPlateau`` keeps a little state and is told each validation result (``schedule.step(loss)``).
All have ``state_dict()`` / ``load_state_dict()`` (JSON-able) so checkpoints can carry them.

>>> import numpy as np, minflux as mf
>>> model = {"w": np.zeros(1)}
>>> state = mf.optim.setup(mf.optim.Adam(), model)
>>> schedule = mf.optim.StepDecay(lr=0.1, step_size=10, gamma=0.5)
>>> for t in range(25):
...     mf.optim.adjust(state, lr=schedule(t))
>>> state["w"].rule.lr
0.025
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

__all__ = ["CosineDecay", "ExponentialDecay", "LinearWarmup", "OneCycle", "ReduceOnPlateau", "StepDecay"]


class _Stateful:
    def state_dict(self) -> dict:
        """The schedule's fields as a JSON-able dict."""
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        """Restore fields saved by ``state_dict`` (unknown keys are an error)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(state) - names)
        if unknown:
            raise ValueError(f"{type(self).__name__}.load_state_dict: unknown keys {unknown}; "
                             f"expected {sorted(names)}")
        for key, value in state.items():
            setattr(self, key, value)


@dataclass
class StepDecay(_Stateful):
    """``lr * gamma ** (t // step_size)``: multiply by ``gamma`` every ``step_size`` steps.

    >>> import minflux as mf
    >>> s = mf.optim.StepDecay(lr=1.0, step_size=2, gamma=0.1)
    >>> [s(t) for t in range(5)]
    [1.0, 1.0, 0.1, 0.1, 0.010000000000000002]
    """

    lr: float
    step_size: int
    gamma: float = 0.1

    def __call__(self, t: int) -> float:
        if self.step_size <= 0:
            raise ValueError(f"StepDecay.step_size must be positive, got {self.step_size}")
        return self.lr * self.gamma ** (t // self.step_size)


@dataclass
class ExponentialDecay(_Stateful):
    """``max(lr * gamma ** t, lr_min)``.

    >>> import minflux as mf
    >>> s = mf.optim.ExponentialDecay(lr=1.0, gamma=0.5, lr_min=0.2)
    >>> [s(t) for t in range(4)]
    [1.0, 0.5, 0.25, 0.2]
    """

    lr: float
    gamma: float
    lr_min: float = 0.0

    def __call__(self, t: int) -> float:
        return max(self.lr * self.gamma ** t, self.lr_min)


@dataclass
class CosineDecay(_Stateful):
    """Linear warm-up over ``warmup`` steps, then a half cosine from ``lr`` to ``lr_min`` at ``total``.

    ``t < warmup``: ``lr * (t + 1) / warmup``; then with ``p = (t - warmup) / (total - warmup)``
    clipped to [0, 1]: ``lr_min + (lr - lr_min) * (1 + cos(pi p)) / 2`` (Loshchilov and Hutter 2017).

    >>> import minflux as mf
    >>> s = mf.optim.CosineDecay(lr=1.0, total=4)
    >>> [round(s(t), 3) for t in range(6)]
    [1.0, 0.854, 0.5, 0.146, 0.0, 0.0]
    """

    lr: float
    total: int
    lr_min: float = 0.0
    warmup: int = 0

    def __call__(self, t: int) -> float:
        if t < self.warmup:
            return self.lr * (t + 1) / self.warmup
        span = max(self.total - self.warmup, 1)
        p = min(max((t - self.warmup) / span, 0.0), 1.0)
        return self.lr_min + (self.lr - self.lr_min) * (1.0 + math.cos(math.pi * p)) / 2.0


@dataclass
class LinearWarmup(_Stateful):
    """A linear ramp from ``start_factor * lr`` to ``lr`` over ``warmup`` steps, then ``after``.

    ``t < warmup``: ``lr * (start_factor + (1 - start_factor) * t / warmup)`` (with the default
    ``start_factor=0`` the first step has rate 0, as in the usual transformer recipes; this is
    ``torch.optim.lr_scheduler.LinearLR``'s ramp). From ``t = warmup`` on the rate is
    ``after(t - warmup)`` for another schedule ``after``, or ``lr`` when there is none.

    >>> import minflux as mf
    >>> s = mf.optim.LinearWarmup(lr=1.0, warmup=4)
    >>> [s(t) for t in range(6)]
    [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    >>> s = mf.optim.LinearWarmup(lr=1.0, warmup=2, after=mf.optim.ExponentialDecay(lr=1.0, gamma=0.5))
    >>> [s(t) for t in range(5)]
    [0.0, 0.5, 1.0, 0.5, 0.25]
    """

    lr: float
    warmup: int
    start_factor: float = 0.0
    after: object = None

    def __post_init__(self):
        if self.warmup < 0:
            raise ValueError(f"LinearWarmup.warmup must be non-negative, got {self.warmup}")
        if not 0.0 <= self.start_factor <= 1.0:
            raise ValueError(f"LinearWarmup.start_factor must be in [0, 1], got {self.start_factor}")
        if self.after is not None and not callable(self.after):
            raise TypeError(f"LinearWarmup.after must be a schedule (callable on the step), got "
                            f"{type(self.after).__name__}")

    def __call__(self, t: int) -> float:
        if t < self.warmup:
            return self.lr * (self.start_factor + (1.0 - self.start_factor) * t / self.warmup)
        return self.lr if self.after is None else self.after(t - self.warmup)

    def state_dict(self) -> dict:
        """The fields as a JSON-able dict; the ``after`` schedule contributes its own state dict."""
        state = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "after"}
        state["after"] = None if self.after is None else self.after.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore fields saved by ``state_dict`` into this schedule and its ``after`` schedule."""
        state = dict(state)
        after = state.pop("after", None)
        if (after is None) != (self.after is None):
            raise ValueError("LinearWarmup.load_state_dict: the saved schedule "
                             f"{'has no' if after is None else 'has an'} 'after' schedule and this one "
                             f"{'does' if after is None else 'does not'}")
        super().load_state_dict(state)
        if after is not None:
            self.after.load_state_dict(after)


@dataclass
class OneCycle(_Stateful):
    """The one-cycle policy (Smith and Topin 2019), as ``torch.optim.lr_scheduler.OneCycleLR``.

    The rate rises from ``lr / div_factor`` to ``lr`` over the first ``pct_start`` of ``total``
    steps, then anneals to ``lr / (div_factor * final_div_factor)`` at step ``total - 1`` (and stays
    there). ``anneal`` is ``"cos"`` or ``"linear"``; ``three_phase=True`` comes back down to the
    initial rate symmetrically before the final annealing, as in fast.ai's original schedule.

    >>> import minflux as mf
    >>> s = mf.optim.OneCycle(lr=1.0, total=10, pct_start=0.3, final_div_factor=1.0)
    >>> [round(s(t), 3) for t in (0, 2, 9)]
    [0.04, 1.0, 0.04]
    """

    lr: float
    total: int
    pct_start: float = 0.3
    div_factor: float = 25.0
    final_div_factor: float = 1e4
    anneal: str = "cos"
    three_phase: bool = False

    def __post_init__(self):
        if self.total <= 1:
            raise ValueError(f"OneCycle.total must be at least 2 steps, got {self.total}")
        if not 0.0 < self.pct_start < 1.0:
            raise ValueError(f"OneCycle.pct_start must be in (0, 1), got {self.pct_start}")
        if self.anneal not in ("cos", "linear"):
            raise ValueError(f'OneCycle.anneal must be "cos" or "linear", got {self.anneal!r}')

    def _phases(self) -> list[tuple[float, float, float]]:
        initial = self.lr / self.div_factor
        final = initial / self.final_div_factor
        rise = self.pct_start * self.total - 1
        if self.three_phase:
            return [(rise, initial, self.lr), (2 * self.pct_start * self.total - 2, self.lr, initial),
                    (self.total - 1, initial, final)]
        return [(rise, initial, self.lr), (self.total - 1, self.lr, final)]

    def __call__(self, t: int) -> float:
        t = min(t, self.total - 1)
        start = 0.0
        phases = self._phases()
        for k, (end, first, last) in enumerate(phases):
            if t <= end or k == len(phases) - 1:
                p = (t - start) / (end - start)
                if self.anneal == "linear":
                    return first + (last - first) * p
                return last + (first - last) / 2.0 * (math.cos(math.pi * p) + 1.0)
            start = end
        raise AssertionError("unreachable")


@dataclass
class ReduceOnPlateau(_Stateful):
    """Multiply the rate by ``factor`` when a monitored value stops improving.

    Call ``step(value)`` after each evaluation; it returns the rate to use next. An improvement is a
    value below ``best - |best| * threshold`` (above ``best + |best| * threshold`` with
    ``mode="max"``), so that a negative monitored value (a log-likelihood) needs the same relative
    margin as a positive one; after more than ``patience`` evaluations without one the rate is reduced (not below ``lr_min``)
    and the count restarts. The defaults follow the HM-LSTM recipe (Chung et al. 2017): divide by 50
    as soon as the validation loss fails to improve.

    >>> import minflux as mf
    >>> s = mf.optim.ReduceOnPlateau(lr=0.002)
    >>> [s.step(v) for v in [1.5, 1.4, 1.45, 1.3]]
    [0.002, 0.002, 4e-05, 4e-05]
    """

    lr: float
    factor: float = 1.0 / 50.0
    patience: int = 0
    threshold: float = 0.0
    mode: str = "min"
    lr_min: float = 0.0
    best: float | None = None
    bad_steps: int = 0
    reductions: int = 0

    def __post_init__(self):
        if self.mode not in ("min", "max"):
            raise ValueError(f'ReduceOnPlateau.mode must be "min" or "max", got {self.mode!r}')
        if not 0.0 < self.factor < 1.0:
            raise ValueError(f"ReduceOnPlateau.factor must be in (0, 1), got {self.factor}")

    def _improves(self, value: float) -> bool:
        if self.best is None:
            return True
        if self.mode == "min":
            return value < self.best - abs(self.best) * self.threshold
        return value > self.best + abs(self.best) * self.threshold

    def step(self, value: float) -> float:
        """Record one evaluation result and return the (possibly reduced) rate."""
        value = float(value)
        if self._improves(value):
            self.best = value
            self.bad_steps = 0
        else:
            self.bad_steps += 1
            if self.bad_steps > self.patience:
                self.lr = max(self.lr * self.factor, self.lr_min)
                self.reductions += 1
                self.bad_steps = 0
        return self.lr

    def __call__(self, t: int | None = None) -> float:
        """The current rate (the step is ignored; the rate changes only through ``step``)."""
        return self.lr
