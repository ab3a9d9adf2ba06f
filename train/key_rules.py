"""Config keys that depend on each other: keys that apply to one model kind or one learning-rate
schedule only, factors that must stay below 1, and a validation long enough to mean something.

A key set to anything but its default where it means nothing (``model.layer_norm = true`` under
``model.kind = "lstm"``, ``optim.decay_every`` under ``optim.schedule = "cosine"``) is refused with one
line that says which kind or schedule the key applies to, so a run never silently ignores a setting.

>>> from minflux_train.config import Config, ModelConfig
>>> problems(Config(model=ModelConfig(kind="lstm", layer_norm=True)))[0]
'model.layer_norm = true means nothing for model.kind = "lstm": ...'
>>> problems(Config())
[]
"""
from __future__ import annotations

import dataclasses

HMLSTM_ONLY = ("model.layer_norm", "model.cell_form", "model.init", "model.mode")
SCHEDULES = ("plateau", "constant", "cosine", "step", "exponential", "one_cycle")

# key -> (the key that decides whether it means something, the values under which it does)
APPLIES_TO = {
    **{key: ("model.kind", ("hmlstm",)) for key in HMLSTM_ONLY},
    "optim.plateau_factor": ("optim.schedule", ("plateau",)),
    "optim.plateau_patience": ("optim.schedule", ("plateau",)),
    "optim.decay_steps": ("optim.schedule", ("cosine", "one_cycle")),
    "optim.decay_every": ("optim.schedule", ("step", "exponential")),
    "optim.decay_factor": ("optim.schedule", ("step", "exponential")),
    "optim.one_cycle_rise": ("optim.schedule", ("one_cycle",)),
    "optim.min_lr": ("optim.schedule", ("plateau", "cosine", "step", "exponential")),
    "optim.warmup_steps": ("optim.schedule", tuple(s for s in SCHEDULES if s != "one_cycle")),
}

ALSO_READ = {  # what the other kind or schedule reads instead, for the message
    "model.kind": {"lstm": "the LSTM baseline reads model.embed_size, model.hidden_sizes, "
                           "model.output_embed_size and model.dtype"},
    "optim.schedule": {"one_cycle": "one_cycle rises from optim.lr / 25 by itself"},
}

BELOW_ONE = {"optim.decay_factor": "a factor of 1 or more would not lower the rate",
             "optim.one_cycle_rise": "the cycle must leave steps to come down"}

DEPENDENT = frozenset({*APPLIES_TO, "model.kind", "optim.schedule", *BELOW_ONE, "train.eval_chars",
                       "train.eval_batch_size", "train.batch_size", "train.seq_len"})


def _get(cfg, key: str):
    section, _, name = key.partition(".")
    return getattr(getattr(cfg, section), name)


def _default(cfg, key: str):
    section, _, name = key.partition(".")
    return getattr(type(getattr(cfg, section))(), name)


def _toml(value) -> str:
    from .config import _toml_value

    return _toml_value(value)


def _listed(values) -> str:
    quoted = [f'"{v}"' for v in values]
    return quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def meaningless(cfg) -> list[str]:
    """The keys of ``cfg`` set to something other than their default where they mean nothing.

    >>> from minflux_train.config import Config, OptimConfig
    >>> meaningless(Config(optim=OptimConfig(schedule="cosine", decay_every=10)))
    ['optim.decay_every']
    """
    return [key for key, (selector, values) in APPLIES_TO.items()
            if _get(cfg, selector) not in values and _get(cfg, key) != _default(cfg, key)]


def resets(cfg, **changes) -> list[str]:
    """The ``--set KEY=DEFAULT`` options that make ``cfg`` valid once ``changes`` (``model_kind="lstm"``:
    ``model.kind``) are applied: the keys that would then mean nothing, back at their defaults.

    >>> from minflux_train.config import Config, ModelConfig
    >>> resets(Config(model=ModelConfig(layer_norm=True)), model_kind="lstm")
    ['--set model.layer_norm=false']
    """
    changed = dataclasses.replace(cfg)
    for name, value in changes.items():
        section, _, key = name.partition("_")
        setattr(changed, section, dataclasses.replace(getattr(cfg, section), **{key: value}))
    return [f"--set {key}={_toml(_default(cfg, key))}" for key in meaningless(changed)]


def problems(cfg) -> list[str]:
    """Why the keys of ``cfg`` do not agree with each other, one line each (empty when they do).

    >>> from minflux_train.config import Config, TrainConfig
    >>> print(problems(Config(train=TrainConfig(batch_size=4, seq_len=10, eval_chars=20)))[0])
    train.eval_chars = 20 is too few to mean anything: validation cuts them into 4 streams ...; use at least 40 (or 0: the whole split)
    """
    out = []
    for key in meaningless(cfg):
        selector, values = APPLIES_TO[key]
        chosen = _get(cfg, selector)
        siblings = [k for k, (s, v) in APPLIES_TO.items() if s == selector and v == values]
        which = (f"{', '.join(siblings[:-1])} and {siblings[-1]} apply" if len(siblings) > 1 else
                 f"{key} applies")
        instead = ALSO_READ.get(selector, {}).get(chosen)
        others = [s for s in SCHEDULES if s not in values] if selector == "optim.schedule" else []
        where = (f"to every {selector} but {_listed(others)}" if 0 < len(others) < len(values) else
                 f"to {selector} = {_listed(values)} only")
        out.append(f"{key} = {_toml(_get(cfg, key))} means nothing for {selector} = \"{chosen}\": {which} "
                   f"{where}{f' ({instead})' if instead else ''}; remove it or set it back to its default "
                   f"(--set {key}={_toml(_default(cfg, key))})")
    for key, why in BELOW_ONE.items():
        if _get(cfg, key) >= 1.0:
            out.append(f"{key} = {_get(cfg, key)!r} must be below 1: {why}")
    t = cfg.train
    streams = t.eval_batch_size or t.batch_size
    if t.eval_chars and t.eval_chars < streams * t.seq_len:
        out.append(f"train.eval_chars = {t.eval_chars} is too few to mean anything: validation cuts them "
                   f"into {streams} streams (train.eval_batch_size, else train.batch_size), and each must "
                   f"read at least one window of train.seq_len = {t.seq_len} characters, or the result is "
                   f"mostly cold starts; use at least {streams * t.seq_len} (or 0: the whole split)")
    return out
