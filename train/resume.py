"""What ``--resume`` may change, and writing the changes into a run's ``config.toml``.

A resumed run continues the model, optimiser and data position of its checkpoint, so the keys that
define those are fixed: the data, the model, the batch shape, the seed and slope annealing. The keys
in `RESUMABLE` steer how training goes on from here and may change (with ``--set`` or by editing the
run's ``config.toml``): the learning rate and clipping are applied to the restored optimiser, the
rest are read where they are used. Any other change is refused with a message naming the key.
"""
from __future__ import annotations

import json
import re

from .config import Config, ConfigError, _toml_value, parse_config, to_dict

RESUMABLE = frozenset({
    "optim.lr", "optim.clip_norm", "optim.plateau_factor", "optim.plateau_patience", "optim.min_lr",
    "train.epochs", "train.max_steps", "train.max_minutes", "train.eval_every", "train.eval_chars",
    "train.final_eval_chars", "train.eval_batch_size", "train.checkpoint_every", "train.log_every",
    "train.device", "train.compile", "train.compile_check_every", "train.early_stopping", "train.tensorboard",
    "data.cache", "data.cache_dir", "sample.length", "sample.temperature", "sample.prime",
})


def flat(cfg: Config) -> dict:
    """The config as ``{"section.key": value}`` (top-level keys without a section).

    >>> flat(Config())["optim.lr"], flat(Config())["name"]
    (0.002, 'experiment')
    """
    out = {}
    for key, value in to_dict(cfg).items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def changed_keys(old: Config, new: Config) -> list[str]:
    """The dotted keys whose values differ between ``old`` and ``new``.

    >>> changed_keys(Config(), parse_config("[optim]\\nlr = 0.1\\n[train]\\nseed = 2"))
    ['optim.lr', 'train.seed']
    """
    a, b = flat(old), flat(new)
    return sorted(k for k in a if a[k] != b[k])


def check_resumable(trained: Config, wanted: Config, source: str) -> list[str]:
    """The keys ``wanted`` changes relative to the ``trained`` config; a `ConfigError` if any may not.

    >>> check_resumable(Config(), parse_config("[train]\\nmax_steps = 5"), "run")
    ['train.max_steps']
    >>> check_resumable(Config(), parse_config("[model]\\nembed_size = 5"), "run")
    Traceback (most recent call last):
    ...
    minflux_train.config.ConfigError: --resume cannot change model.embed_size (trained with 128, now 5): ...
    """
    changed = changed_keys(trained, wanted)
    refused = [k for k in changed if k not in RESUMABLE]
    if refused:
        a, b = flat(trained), flat(wanted)
        what = ", ".join(f"{k} (trained with {json.dumps(a[k])}, now {json.dumps(b[k])})" for k in refused)
        raise ConfigError(f"--resume cannot change {what}: the checkpoint in {source} was trained with "
                          f"the old value. Drop the --set (or restore the line in config.toml), or start "
                          f"a new run without --resume. Keys that may change on resume: "
                          f"{', '.join(sorted(RESUMABLE))}")
    return changed


def patched_toml(text: str, cfg: Config) -> str:
    """``text`` (a config file) with the values of ``cfg`` written into it, comments and layout kept.

    A key already in the file has its value replaced on its line; a missing key is added under its
    section. When the result would not read back as ``cfg`` (an unusual layout), the whole config is
    written afresh instead.

    >>> text = "# my notes\\n[optim]\\nlr = 0.002  # first try\\n"
    >>> print(patched_toml(text, parse_config("[optim]\\nlr = 0.0005")), end="")
    # my notes
    [optim]
    lr = 0.0005  # first try
    """
    from .config import dump_toml

    old = parse_config(text, "config.toml")
    lines = text.splitlines()
    for key in changed_keys(old, cfg):
        section, _, name = key.rpartition(".")
        lines = _set_line(lines, section, name, _toml_value(flat(cfg)[key]))
    patched = "\n".join(lines) + "\n"
    try:
        if parse_config(patched) == cfg:
            return patched
    except ConfigError:
        pass
    return dump_toml(cfg)


def _set_line(lines: list[str], section: str, name: str, value: str) -> list[str]:
    current, header = "", None
    key_line = re.compile(rf"^(\s*{re.escape(name)}\s*=\s*)([^#]*?)(\s*#.*)?$")
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith("[") and not stripped.startswith("[["):
            current = stripped.strip("[]").strip()
            if current == section:
                header = i
            continue
        match = key_line.match(line) if current == section else None
        if match:
            return lines[:i] + [f"{match.group(1)}{value}{match.group(3) or ''}"] + lines[i + 1:]
    if not section:
        return [f"{name} = {value}"] + lines
    if header is None:
        return lines + ["", f"[{section}]", f"{name} = {value}"]
    return lines[:header + 1] + [f"{name} = {value}"] + lines[header + 1:]
