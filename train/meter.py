"""The running means of a training run's next metrics line, carried through checkpoints."""
from __future__ import annotations

import math
import time

LN2 = math.log(2)


class Meter:
    """Means over the steps between two log lines: loss, characters per second, boundary rates.

    >>> m = Meter(); m.add(2.0, 100, None); m.add(4.0, 100, None)
    >>> summary = m.take(); summary["loss"], summary["boundary_rates"]
    (3.0, [])
    """

    def __init__(self):
        self._reset()

    def _reset(self):
        self.loss, self.chars, self.steps, self.rates = 0.0, 0, 0, None
        self.start, self.paused, self.carried = time.perf_counter(), 0.0, 0.0

    def clock_starts(self) -> None:
        """Count training time from now on (the sums and the time carried from a checkpoint stay)."""
        self.start, self.paused = time.perf_counter(), 0.0

    def add(self, loss: float, chars: int, rates) -> None:
        self.loss, self.chars, self.steps = self.loss + loss, self.chars + chars, self.steps + 1
        if rates is not None:
            self.rates = rates if self.rates is None else self.rates + rates

    def pause(self, seconds: float) -> None:
        self.paused += seconds

    def state_dict(self) -> dict:
        """The sums so far (saved in checkpoints, so a resumed run's next line averages the same steps)."""
        return dict(loss=self.loss, chars=self.chars, steps=self.steps, rates=self.rates,
                    seconds=time.perf_counter() - self.start - self.paused + self.carried)

    def load_state_dict(self, state: dict) -> None:
        self._reset()
        self.loss, self.chars, self.steps, self.rates = (state["loss"], state["chars"], state["steps"],
                                                         state["rates"])
        self.carried = state["seconds"]

    def take(self) -> dict:
        """The summary since the last ``take``, and a fresh start."""
        seconds = max(time.perf_counter() - self.start - self.paused + self.carried, 1e-9)
        mean = self.loss / max(self.steps, 1)
        rates = [] if self.rates is None else [round(float(r), 4) for r in self.rates / self.steps]
        out = dict(loss=mean, bpc=mean / LN2, chars_per_s=self.chars / seconds, boundary_rates=rates)
        self._reset()
        return out
