"""How long the end of a run takes: the final validation and the sample, for the time left.

The final validation reads ``chars`` characters of the validation split in windows of
``eval_batch x seq_len``; each window costs what the run's validations so far measured per window,
or, before the first one, a third of a training step (a forward pass without the backward pass and
the update). The sample calls the model once per character (the prime at once, then one call per
sampled character); ``seq_len`` such calls are counted as one validation window, which holds the
same number of time steps.

>>> eta = EndEstimate(chars=10_000, eval_batch=10, seq_len=100, sample_chars=300)
>>> eta.seconds(step_seconds=0.3)   # 10 windows of 0.1 s, and 300 characters at 0.1 s per 100
1.3
>>> eta.measured(seconds=2.0, chars=40_000); eta.seconds(step_seconds=0.3)   # 0.05 s per window
0.65
"""
from __future__ import annotations

import math


class EndEstimate:
    """Seconds the end of a run (final validation and sample) will take; see the module docstring."""

    def __init__(self, chars: int, eval_batch: int, seq_len: int, sample_chars: int):
        self.windows = math.ceil(chars / max(eval_batch * seq_len, 1))
        self.sample_windows = sample_chars / seq_len
        self.chars_per_window = eval_batch * seq_len
        self.window_seconds: float | None = None

    def measured(self, seconds: float, chars: int) -> None:
        """A validation of ``chars`` characters took ``seconds``."""
        if chars > 0:
            self.window_seconds = seconds * self.chars_per_window / chars

    def seconds(self, step_seconds: float) -> float:
        """The estimate, with ``step_seconds`` per training step as the fallback measure."""
        window = self.window_seconds if self.window_seconds is not None else step_seconds / 3
        return round((self.windows + self.sample_windows) * window, 6)
