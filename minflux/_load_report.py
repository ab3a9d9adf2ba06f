"""What a checkpoint load did: the saved metadata plus which arrays were loaded or skipped, and why."""
from __future__ import annotations

import logging

log = logging.getLogger("minflux.io")


class LoadReport(dict):
    """The metadata saved with a checkpoint (this dict's items), plus what `mf.load` did.

    ``loaded`` maps ``"model"`` and ``"opt_state"`` to the dotted names that were filled from the
    file; ``skipped`` maps them to ``{name: reason}`` for everything left alone: targets missing
    from the checkpoint or of another shape, dtype or rule, and checkpoint entries the target
    lacks. A strict load skips nothing (a mismatch is an error instead).

    >>> report = LoadReport({"step": 3}, {"model": ["W"], "opt_state": []},
    ...                     {"model": {"head.W": "missing from the checkpoint"}, "opt_state": {}})
    >>> report["step"], report.skipped["model"]
    (3, {'head.W': 'missing from the checkpoint'})
    >>> print(report.describe())
    loaded 1 model array and 0 optimiser leaves; skipped 1:
      model head.W: missing from the checkpoint
    """

    def __init__(self, meta: dict, loaded: dict, skipped: dict):
        super().__init__(meta)
        self.loaded = loaded
        self.skipped = skipped

    @property
    def meta(self) -> dict:
        """The saved metadata as a plain dict."""
        return dict(self)

    def describe(self) -> str:
        """A readable account of what was loaded and what was skipped, one skipped entry per line."""
        n_model, n_state = len(self.loaded.get("model", ())), len(self.loaded.get("opt_state", ()))
        lines = [(part, name, why) for part in ("model", "opt_state")
                 for name, why in self.skipped.get(part, {}).items()]
        head = (f"loaded {n_model} model array{'s' if n_model != 1 else ''} and {n_state} optimiser "
                f"lea{'ves' if n_state != 1 else 'f'}")
        if not lines:
            return head + "; skipped nothing"
        label = {"model": "model", "opt_state": "optimiser state of"}
        return "\n".join([f"{head}; skipped {len(lines)}:"] +
                         [f"  {label[part]} {name or '<root>'}: {why}" for part, name, why in lines])

    def log_skips(self, path: str) -> None:
        """Log (at INFO) what was skipped, if anything."""
        if any(self.skipped.values()):
            log.info("checkpoint %s: %s", path, self.describe())
