"""What a checkpoint load did: the saved metadata plus which arrays were loaded or skipped, and why."""
from __future__ import annotations

import logging

from .optim.serialise import rule_to_json

log = logging.getLogger("minflux.io")


def _flat(description: dict, prefix: str = "") -> dict:
    """``{"Adam.lr": 0.001, ...}`` for a rule's JSON description (a chain's members by position)."""
    if description.get("type") == "OptimiserChain":
        return {k: v for i, member in enumerate(description["rules"])
                for k, v in _flat(member, f"{prefix}{i}:").items()}
    return {f"{prefix}{description['type']}.{k}": v for k, v in description.items() if k != "type"}


def mixed_rules(loaded: list, kept: list) -> list[str]:
    """Notes for an optimiser left with two sets of hyperparameters: ``loaded`` rules (those of the
    leaves filled from a checkpoint, which took the file's values) against ``kept`` ones (the leaves
    left alone). Empty when they agree.

    >>> import minflux as mf
    >>> mixed_rules([mf.optim.Adam(lr=0.001)] * 2, [mf.optim.Adam(lr=0.01)])
    ['the optimiser now has two sets of hyperparameters: Adam.lr = 0.001 on the 2 leaves loaded from the checkpoint, 0.01 on the 1 leaf left as it was; set one value with mf.optim.adjust(opt_state, lr=...)']
    """
    if not loaded or not kept:
        return []
    ours, theirs = _flat(rule_to_json(loaded[0])), _flat(rule_to_json(kept[0]))
    if ours.keys() != theirs.keys():
        return [f"the optimiser now has two kinds of rule: {len(loaded)} leaves loaded from the checkpoint, "
                f"{len(kept)} left as they were with another rule"]
    differ = [k for k in ours if ours[k] != theirs[k]]
    if not differ:
        return []
    values = "; ".join(f"{k} = {ours[k]!r} on the {len(loaded)} lea{'ves' if len(loaded) != 1 else 'f'} "
                       f"loaded from the checkpoint, {theirs[k]!r} on the {len(kept)} "
                       f"{'leaves left as they were' if len(kept) != 1 else 'leaf left as it was'}"
                       for k in differ)
    names = ", ".join(f"{k.rsplit('.', 1)[1]}=..." for k in differ)
    return [f"the optimiser now has two sets of hyperparameters: {values}; set one value with "
            f"mf.optim.adjust(opt_state, {names})"]


class LoadReport(dict):
    """The metadata saved with a checkpoint (this dict's items), plus what `mf.load` did.

    ``loaded`` maps ``"model"`` and ``"opt_state"`` to the dotted names that were filled from the
    file; ``skipped`` maps them to ``{name: reason}`` for everything left alone: targets missing
    from the checkpoint or of another shape, dtype or rule, and checkpoint entries the target
    lacks. A strict load skips nothing (a mismatch is an error instead). ``notes`` holds what else
    the caller should know: an optimiser whose loaded leaves took other hyperparameters (a learning
    rate) from the file than the leaves left alone kept (see `mixed_rules`).

    >>> report = LoadReport({"step": 3}, {"model": ["W"], "opt_state": []},
    ...                     {"model": {"head.W": "missing from the checkpoint"}, "opt_state": {}})
    >>> report["step"], report.skipped["model"]
    (3, {'head.W': 'missing from the checkpoint'})
    >>> print(report.describe())
    loaded 1 model array and 0 optimiser leaves; skipped 1:
      model head.W: missing from the checkpoint
    """

    def __init__(self, meta: dict, loaded: dict, skipped: dict, notes=()):
        super().__init__(meta)
        self.loaded = loaded
        self.skipped = skipped
        self.notes = list(notes)

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
        notes = [f"note: {note}" for note in self.notes]
        if not lines:
            return "\n".join([head + "; skipped nothing"] + notes)
        label = {"model": "model", "opt_state": "optimiser state of"}
        return "\n".join([f"{head}; skipped {len(lines)}:"] +
                         [f"  {label[part]} {name or '<root>'}: {why}" for part, name, why in lines] + notes)

    def log_skips(self, path: str) -> None:
        """Log what was skipped, if anything (at INFO), and the notes (as warnings)."""
        if any(self.skipped.values()):
            log.info("checkpoint %s: %s", path, self.describe())
        for note in self.notes:
            log.warning("checkpoint %s: %s", path, note)
