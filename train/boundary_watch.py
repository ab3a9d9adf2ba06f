"""A warning when an HM-LSTM's boundary detector has died: it fires (almost) never or (almost) always.

A detector whose pre-activations all lie beyond ``±1 / a`` gets exactly zero straight-through
gradient, so nothing in training brings it back; the model then runs as a plain stacked LSTM. The
watch looks at each validation's rates and warns once per layer and direction when a rate stays below
`LOW` or above `HIGH` for `PATIENCE` validations in a row.
"""
from __future__ import annotations

import logging

log = logging.getLogger(__name__)

LOW, HIGH, PATIENCE = 0.01, 0.99, 2

REMEDIES = ('likely remedies: start again with the paper\'s cell form (model.cell_form = "blend", the '
            'default; "branch" gives z gradient only through the gates, which pushes it toward firing '
            'always), the authors\' initialisation (model.init = "authors", the default), layer '
            'normalisation (model.layer_norm = true), or a smaller learning rate (optim.lr), so that '
            'the first Adam steps cannot push every pre-activation out of the window at once')


class BoundaryWatch:
    """Feed it each validation's boundary rates; it logs a warning once per dead detector.

    >>> watch = BoundaryWatch()
    >>> watch.check(100, [0.004, 0.3]), watch.check(200, [0.002, 0.3])
    ([], ["layer 1's boundary detector has stopped firing"])
    >>> watch.check(300, [0.001, 0.3])      # already reported: no second warning
    []
    """

    def __init__(self):
        self._history: dict[int, list[tuple[int, float]]] = {}
        self._reported: set[tuple[int, str]] = set()

    def check(self, step: int, rates) -> list[str]:
        """Record ``rates`` (one per detector) at ``step``; returns the headlines of new warnings."""
        warned = []
        for layer, rate in enumerate(rates, start=1):
            history = self._history.setdefault(layer, [])
            history.append((step, float(rate)))
            recent = history[-PATIENCE:]
            if len(recent) < PATIENCE:
                continue
            low, high = all(r < LOW for _, r in recent), all(r > HIGH for _, r in recent)
            for kind, dead in (("low", low), ("high", high)):
                if dead and (layer, kind) not in self._reported:
                    self._reported.add((layer, kind))
                    warned.append(self._warn(layer, kind, recent))
        return warned

    @staticmethod
    def _warn(layer: int, kind: str, recent) -> str:
        seen = " and ".join(f"{r:.2%}" for _, r in recent)
        steps = " and ".join(str(s) for s, _ in recent)
        if kind == "low":
            headline = f"layer {layer}'s boundary detector has stopped firing"
            effect = (f"z = 1 on {seen} of validation characters at steps {steps}. Once all its "
                      f"pre-activations are below -1/a the straight-through gradient is exactly zero and it "
                      f"cannot recover by itself; meanwhile layer {layer + 1} is almost never updated: the "
                      f"model is in effect a plain LSTM")
        else:
            headline = f"layer {layer}'s boundary detector fires on every character"
            effect = (f"z = 1 on {seen} of validation characters at steps {steps}. Once all its "
                      f"pre-activations are above 1/a the straight-through gradient is exactly zero and it "
                      f"cannot recover by itself; meanwhile layer {layer} flushes its memory at every step "
                      f"and layer {layer + 1} updates at every step: there is no hierarchy")
        log.warning("%s: %s; %s", headline, effect, REMEDIES)
        return headline
