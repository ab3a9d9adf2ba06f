"""Experiment configuration: TOML files in ``configs/`` loaded into dataclasses, checked key by key.

An unknown key, a value of the wrong type or outside its choices, or a missing file is a `ConfigError`
that names the key, the file and the allowed keys. Command-line overrides (``--set optim.lr=0.001``)
go through the same checks. `dump_toml` writes a resolved config back as TOML that `load_config` reads.

>>> cfg = load_config(None, ["optim.lr=0.001", "model.hidden_sizes=[64, 64]"])
>>> cfg.optim.lr, cfg.model.hidden_sizes, cfg.data.corpus
(0.001, [64, 64], 'default')
"""
from __future__ import annotations

import dataclasses
import json
import math
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path

from . import key_rules

CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # the repository's configs/, installed with train


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the key, the file and the fix."""


def setting(default, doc: str):
    """A dataclass field with its meaning ``doc`` (shown in the config reference, docs/config.md)."""
    return field(default=default, metadata={"doc": doc})


def choice(default, *choices, doc: str):
    """A dataclass field whose value must be one of ``choices``."""
    return field(default=default, metadata={"choices": choices, "doc": doc})


def bounded(default, *, above=None, at_least=None, note: str = "", factory=None, doc: str):
    """A number field (or list of numbers) that must be ``> above`` or ``>= at_least``; ``note`` says
    what a boundary value means (e.g. "0: no limit")."""
    extra = {"default_factory": factory} if factory else {"default": default}
    return field(**extra, metadata={"above": above, "at_least": at_least, "note": note, "doc": doc})


@dataclass
class DataConfig:
    """``[data]``: which corpus and where its files are."""

    corpus: str = choice(
        "default", "default", "ptb", "text8", "enwik8", "text",
        doc="the corpus: the Python documentation topics every installation carries (default), Penn "
            "Treebank characters (ptb), text8, enwik8, or your own text file or folder (text)")
    path: str = setting(
        "", "the corpus's file or folder (for text: a UTF-8 file, or a folder whose non-hidden files, "
            "subfolders included, are joined in sorted order); \"\" means the corpus's usual place "
            "(e.g. `data/ptb`)")
    encoding: str = choice(
        "chars", "chars", "bytes",
        doc="for corpus = \"text\": one token per Unicode character (chars) or per byte (bytes)")
    split: list[float] = bounded(
        None, at_least=0.0, factory=lambda: [0.9, 0.05, 0.05],
        doc="train, validation and test fractions, in that order, cut at int(fraction * length) "
            "(default and text corpora)")
    cache: bool = setting(True, "keep the token arrays in an HDF5 cache, so a second run skips tokenising")
    cache_dir: str = setting(
        "", "where the token cache lives; \"\" means `<cache root>/datasets`, the cache root being "
            "`$MINFLUX_CACHE_DIR` or the user cache directory's `minflux` (`~/.cache/minflux`)")


@dataclass
class ModelConfig:
    """``[model]``: the network."""

    kind: str = choice("hmlstm", "hmlstm", "lstm",
                       doc="hierarchical multiscale LSTM (hmlstm) or the stacked-LSTM baseline (lstm)")
    embed_size: int = bounded(128, at_least=1, doc="size of the character embedding")
    hidden_sizes: list[int] = bounded(None, at_least=1, factory=lambda: [512, 512, 512],
                                      doc="hidden units per layer, bottom first (one entry per layer)")
    output_embed_size: int = bounded(512, at_least=0, note="0: the largest hidden size",
                                     doc="width of the output embedding that gates and mixes all layers")
    layer_norm: bool = setting(False, "layer normalisation of the gate pre-activations")
    cell_form: str = choice("blend", "blend", "branch",
                            doc="the HM-LSTM cell update: the paper's blend, or the same as branches "
                                "(if/elif)")
    init: str = choice("authors", "authors", "independent",
                       doc="HM-LSTM weights: the authors' scheme (one block repeated for the four gates) "
                           "or independent blocks per gate (see models.HMLSTM)")
    mode: str = choice("mixed", "mixed", "reverse",
                       doc="how elementwise kernels are differentiated: fused mixed mode, or op by op "
                           "on the tape (reverse, the baseline)")
    dtype: str = choice("float32", "float32", "float64", doc="floating-point type of parameters and state")


@dataclass
class OptimConfig:
    """``[optim]``: Adam with global gradient-norm clipping, a learning-rate schedule and a warm-up."""

    lr: float = bounded(0.002, above=0.0, doc="Adam's initial learning rate (the peak of a schedule)")
    clip_norm: float = bounded(1.0, at_least=0.0, note="0: no clipping",
                               doc="clip the global gradient norm to this value")
    schedule: str = choice(
        "plateau", "plateau", "constant", "cosine", "step", "exponential", "one_cycle",
        doc="how the learning rate changes: divided by `optim.plateau_factor` when validation stops "
            "improving (plateau), never (constant), a half cosine from `optim.lr` to `optim.min_lr` "
            "over `optim.decay_steps` (cosine), multiplied by `optim.decay_factor` every "
            "`optim.decay_every` steps at once (step) or gradually (exponential), or the one-cycle "
            "policy over `optim.decay_steps` (one_cycle); see docs/training.md")
    warmup_steps: int = bounded(0, at_least=0, note="0: no warm-up",
                                doc="raise the rate linearly over the first N steps, from `optim.lr / "
                                    "(N + 1)` to the schedule's; the schedule starts after them "
                                    "(not with one_cycle, which warms up itself)")
    plateau_factor: float = bounded(50.0, above=1.0, note="the learning rate is divided by it",
                                    doc="plateau: divide the learning rate by this when validation stops "
                                        "improving")
    plateau_patience: int = bounded(2, at_least=0,
                                    doc="plateau: validations without improvement before the learning "
                                        "rate drops")
    decay_steps: int = bounded(0, at_least=0, note="0: the run's step limit, less the warm-up",
                               doc="cosine and one_cycle: steps the schedule spans (fixed when the run "
                                   "starts; afterwards the rate stays at its last value)")
    decay_every: int = bounded(1000, at_least=1,
                               doc="step and exponential: the rate is multiplied by `optim.decay_factor` "
                                   "every this many steps")
    decay_factor: float = bounded(0.5, above=0.0,
                                  doc="step and exponential: the factor, below 1, applied every "
                                      "`optim.decay_every` steps")
    one_cycle_rise: float = bounded(0.3, above=0.0,
                                    doc="one_cycle: the fraction of `optim.decay_steps`, below 1, spent "
                                        "rising from `optim.lr / 25` to `optim.lr`")
    min_lr: float = bounded(1e-6, at_least=0.0,
                            doc="plateau, cosine, step and exponential: the learning rate never drops "
                                "below this")


@dataclass
class TrainConfig:
    """``[train]``: batching, length of the run, evaluation and checkpoint intervals, device."""

    batch_size: int = bounded(64, at_least=1, doc="parallel streams per step")
    seq_len: int = bounded(100, at_least=1, doc="characters per stream per step (the truncated-BPTT window)")
    epochs: int = bounded(10, at_least=1, doc="stop after this many passes over the training split")
    max_steps: int = bounded(0, at_least=0, note="0: no limit other than epochs",
                             doc="stop after this many steps (counted over all sessions of a run)")
    max_minutes: float = bounded(0.0, at_least=0.0, note="0: no time limit",
                                 doc="stop (and save) after this many minutes of training, counted over "
                                     "all sessions; how many steps that is depends on the machine's load")
    eval_every: int = bounded(0, at_least=0, note="0: once per epoch", doc="steps between validations")
    eval_chars: int = bounded(0, at_least=0, note="0: the whole split",
                              doc="validate on the first N characters only (the final validation reads "
                                  "`train.final_eval_chars`)")
    final_eval_chars: int = bounded(0, at_least=0, note="0: the whole split",
                                    doc="the validation at the end of a run reads the first N characters "
                                        "only: a quick end-to-end check of a big config (results are "
                                        "reported over the whole split, so leave it 0 for them)")
    eval_batch_size: int = bounded(0, at_least=0, note="0: the training batch size",
                                   doc="streams the validation split is divided into")
    checkpoint_every: int = bounded(200, at_least=1,
                                    doc="steps between `checkpoints/latest.h5` (also written at each "
                                        "validation, epoch end and stop)")
    log_every: int = bounded(10, at_least=1,
                             doc="steps between `metrics.jsonl` lines, and progress lines when the output "
                                 "is not a terminal")
    early_stopping: int = bounded(0, at_least=0, note="0: off",
                                  doc="stop when this many validations in a row have not improved on the "
                                      "best (the end record of `metrics.jsonl` says `\"stopped\": "
                                      "\"early_stopping\"`)")
    tensorboard: bool = setting(False, "also write TensorBoard event files to `RUN/tensorboard` (needs "
                                "the tensorboardX package: `pip install 'minflux[tensorboard]'`)")
    slope_annealing: bool = setting(True, "anneal the HM-LSTM boundary slope, `a = min(5, 1 + 0.04 * epoch)`")
    seed: int = setting(0, "seed of the random generators (parameter initialisation, the final sample)")
    compile: bool = setting(True, "replay each step as a recorded schedule (`mf.compile`): the eager "
                            "step's numbers to the last bit without Python per operation; false runs "
                            "the step eagerly")
    compile_check_every: int = bounded(5000, at_least=0, note="0: never",
                                       doc="steps between replays checked against the eager step (both "
                                           "run, on copies; a difference stops the run with "
                                           "`mf.ReplayMismatch` naming what differed)")
    device: str = choice("auto", "cpu", "gpu", "auto", doc="where to train; auto: the GPU when CuPy finds one")


@dataclass
class SampleConfig:
    """``[sample]``: the text printed at the end of a run."""

    length: int = bounded(300, at_least=0, doc="characters to generate")
    temperature: float = bounded(1.0, at_least=0.0, note="0: always the most likely character",
                                 doc="divides the logits before sampling; lower is more conservative")
    prime: str = setting("", "text fed to the model before sampling (printed before the sample)")


@dataclass
class Config:
    """A whole experiment: ``name`` and the ``[data]``, ``[model]``, ``[optim]``, ``[train]`` and
    ``[sample]`` tables.

    >>> Config().train.seq_len, Config().model.kind
    (100, 'hmlstm')
    """

    name: str = setting("experiment", "names the run directory, `runs/<name>-<date>-<time>`")
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)


def _type_name(tp) -> str:
    if typing.get_origin(tp) is list:
        inner = typing.get_args(tp)[0]
        return f"a list of {({int: 'integers', float: 'numbers', str: 'strings'}).get(inner, inner)}"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, str(tp))


def _check_value(value, tp, where: str):
    """``value`` converted to ``tp`` (ints widen to floats), or a ConfigError."""
    if typing.get_origin(tp) is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where} must be {_type_name(tp)}, got {type(value).__name__} {value!r}")
        (inner,) = typing.get_args(tp)
        return [_check_value(v, inner, f"{where}[{i}]") for i, v in enumerate(value)]
    ok = (isinstance(value, tp) and not (tp is int and isinstance(value, bool))) or (
        tp is float and isinstance(value, int) and not isinstance(value, bool))
    if not ok:
        raise ConfigError(f"{where} must be {_type_name(tp)}, got {type(value).__name__} {value!r}")
    if tp is float:
        value = float(value)
        if not math.isfinite(value):
            raise ConfigError(f"{where} must be a finite number, got {value!r}")
    return value


def _fill(cls, table: dict, source: str, section: str = ""):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    prefix = f"{section}." if section else ""
    kwargs = {}
    for key, value in table.items():
        if key not in fields:
            allowed = ", ".join(fields)
            where = f"[{section}]" if section else "the top level"
            raise ConfigError(f"{source}: unknown key '{prefix}{key}'; allowed keys in {where}: {allowed}")
        tp = hints[key]
        where = f"{source}: {prefix}{key}"
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"{where} must be a table ([{key}]), got {type(value).__name__}")
            kwargs[key] = _fill(tp, value, source, key)
            continue
        value = _check_value(value, tp, where)
        choices = fields[key].metadata.get("choices")
        if choices and value not in choices:
            raise ConfigError(f"{where} must be one of {', '.join(map(repr, choices))}, got {value!r}")
        _check_bounds(value, fields[key].metadata, where)
        kwargs[key] = value
    return cls(**kwargs)


def _check_bounds(value, metadata, where: str) -> None:
    above, at_least = metadata.get("above"), metadata.get("at_least")
    if above is None and at_least is None:
        return
    if isinstance(value, list):
        if not value:
            raise ConfigError(f"{where} must not be empty")
        for i, v in enumerate(value):
            _check_bounds(v, metadata, f"{where}[{i}]")
        return
    note = f" ({metadata['note']})" if metadata.get("note") else ""
    if above is not None and not value > above:
        raise ConfigError(f"{where} must be > {above}{note}, got {value!r}")
    if at_least is not None and not value >= at_least:
        raise ConfigError(f"{where} must be >= {at_least}{note}, got {value!r}")


def _parse_override(text: str) -> tuple[list[str], object]:
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text!r}: write KEY=VALUE, e.g. --set optim.lr=0.001")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()  # a bare word such as ptb is a string
    return key.split("."), value


def resolve_path(path: str | Path) -> Path:
    """``path`` as given, else inside ``configs/`` (so ``--config hmlstm_ptb`` works).

    >>> resolve_path("default").name
    'default.toml'
    """
    path = Path(path).expanduser()
    candidates = [path, CONFIG_DIR / path, CONFIG_DIR / f"{path}.toml"]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if path.is_dir():
        raise ConfigError(_folder_message(path))
    shipped = ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.toml")))
    where = "" if path.is_absolute() else f", nor in {CONFIG_DIR}"
    raise ConfigError(f"config file not found: {path} (not in the current folder{where}); shipped "
                      f"configs: {shipped}")


def _folder_message(path: Path) -> str:
    """Why a folder is not a config, and which file (or command) was likely meant."""
    if (path / "config.toml").is_file():
        return (f"config {path} is a folder, not a config file: it holds a run, so continue it with --out "
                f"{path} --resume, or start a new run from its config with --config {path / 'config.toml'}")
    tomls = sorted(path.glob("*.toml"))
    which = f" (it holds {', '.join(t.name for t in tomls[:5])})" if tomls else " (it holds no .toml file)"
    return f"config {path} is a folder, not a config file: name a .toml file{which}"


def load_config(path: str | Path | None = "default", overrides: list[str] = ()) -> Config:
    """Read TOML ``path`` (None: built-in defaults) and apply ``KEY=VALUE`` overrides.

    >>> load_config(None, ["data.corpus=ptb"]).data.corpus
    'ptb'
    """
    cfg = Config()
    if path is not None:
        file = resolve_path(path)
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{file} is not a TOML config: it is not UTF-8 text (byte {exc.start}); "
                              "pass a .toml file") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config {file}: {exc.strerror or exc}") from None
        cfg = parse_config(text, str(file))
    return apply_overrides(cfg, overrides, str(file) if path is not None else "the built-in defaults")


def parse_config(text: str, source: str = "<text>") -> Config:
    """The config TOML ``text`` describes (``source`` names it in errors).

    >>> parse_config('[optim]\\nlr = 0.01').optim.lr
    0.01
    """
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source} is not valid TOML: {exc}") from None
    return _fill(Config, table, source)


_DEPENDENT = ("optim.lr", "optim.min_lr", "model.dtype", *key_rules.DEPENDENT)


def _checked(cfg: Config, source: str) -> Config:
    """``cfg``, once the keys that depend on each other agree (a learning rate the parameters' dtype
    can hold, no key set where it means nothing: `train.key_rules`)."""
    import numpy as np

    for problem in key_rules.problems(cfg):
        raise ConfigError(f"{source}: {problem}")

    largest = float(np.finfo(cfg.model.dtype).max)
    for key in ("lr", "min_lr"):
        value = getattr(cfg.optim, key)
        if value > largest:
            raise ConfigError(f"{source}: optim.{key} = {value!r} is more than model.dtype = "
                              f"{cfg.model.dtype} can hold (at most {largest:.4g}), so every update would "
                              f"be infinite; use a learning rate such as 0.002")
    return cfg


def apply_overrides(cfg: Config, overrides: list[str] = (), source: str = "the config") -> Config:
    """``cfg`` with ``KEY=VALUE`` overrides applied (each checked like a key of a file), then the keys
    that depend on each other checked together (``source`` names ``cfg`` in that error, unless an
    override set one of them).

    >>> apply_overrides(Config(), ["train.seed=3"]).train.seed
    3
    """
    for text in overrides:
        keys, value = _parse_override(text)
        patch = value
        for key in reversed(keys):
            patch = {key: patch}
        merged = _merge(to_dict(cfg), patch)
        cfg = _fill(Config, merged, f"--set {text}")
        if ".".join(keys) in _DEPENDENT:
            source = f"--set {text}"
    return _checked(cfg, source)


def _merge(base: dict, patch: dict) -> dict:
    out = dict(base)
    for k, v in patch.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def to_dict(cfg) -> dict:
    """The config as nested plain dicts (JSON- and TOML-ready).

    >>> to_dict(Config())["optim"]["clip_norm"]
    1.0
    """
    return dataclasses.asdict(cfg)


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def dump_toml(cfg: Config) -> str:
    """TOML text for ``cfg`` that `load_config` reads back into an equal config.

    >>> import tomllib
    >>> tomllib.loads(dump_toml(Config()))["optim"]["lr"]
    0.002
    """
    data = to_dict(cfg)
    lines = [f"{k} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for section, table in data.items():
        if isinstance(table, dict):
            lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
