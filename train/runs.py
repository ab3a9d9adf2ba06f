"""A run directory and what it holds; building the model a config describes; reopening a run.

A run directory (``runs/<name>-<date>-<time>`` unless ``--out`` says otherwise) contains::

    config.toml            the resolved config (what --resume and the tools below read)
    metrics.jsonl          one JSON object per line: train / valid / lr / end records
    train.log              the log of every session of the run
    checkpoints/latest.h5  written every train.checkpoint_every steps, at each validation and on exit
    checkpoints/best.h5    the parameters with the best validation bits per character so far
    sample.txt             the sample printed at the end
"""
from __future__ import annotations

import argparse
import datetime
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import minflux as mf
from minflux.backend import DeviceError
from minflux.device import resolve_device

from .config import Config, ModelConfig, load_config
from .data import Vocabulary, load_corpus

log = logging.getLogger(__name__)


class RunError(RuntimeError):
    """A run directory is missing, incomplete, or does not match the config."""


class RunDir:
    """The paths of one run directory.

    >>> import tempfile
    >>> run = RunDir(tempfile.mkdtemp())
    >>> run.latest.name, run.best.parent.name
    ('latest.h5', 'checkpoints')
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.config = self.path / "config.toml"
        self.metrics = self.path / "metrics.jsonl"
        self.log = self.path / "train.log"
        self.checkpoints = self.path / "checkpoints"
        self.latest = self.checkpoints / "latest.h5"
        self.best = self.checkpoints / "best.h5"
        self.sample = self.path / "sample.txt"

    def create(self) -> "RunDir":
        self.checkpoints.mkdir(parents=True, exist_ok=True)
        return self

    def checkpoint(self, name: str) -> Path:
        """``best`` or ``latest``, or a path to any checkpoint file."""
        if name in ("best", "latest"):
            return self.checkpoints / f"{name}.h5"
        return Path(name)

    def __str__(self) -> str:
        return str(self.path)


def new_run_path(cfg: Config, root: str | Path = "runs") -> Path:
    """``runs/<name>-YYYYmmdd-HHMMSS`` (a numeric suffix keeps it unique).

    >>> new_run_path(Config(name="ptb")).parent.name, new_run_path(Config(name="ptb")).name[:4]
    ('runs', 'ptb-')
    """
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{cfg.name}-{stamp}"
    n = 1
    while path.exists():
        n += 1
        path = Path(root) / f"{cfg.name}-{stamp}-{n}"
    return path


def latest_run_path(cfg: Config, root: str | Path = "runs") -> Path | None:
    """The most recently modified run of config ``cfg.name`` under ``root``, if any.

    >>> import tempfile
    >>> latest_run_path(Config(name="none"), tempfile.mkdtemp()) is None
    True
    """
    runs = [p for p in Path(root).glob(f"{cfg.name}-*") if (p / "config.toml").is_file()]
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def pick_device(device: str) -> str:
    """``"cpu"`` or ``"gpu"`` for ``train.device`` (`minflux.device.resolve_device`, errors as RunError).

    >>> pick_device("cpu")
    'cpu'
    """
    try:
        return resolve_device(device)
    except (DeviceError, ValueError) as e:
        raise RunError(f"train.device: {e} (set it with --set train.device=...)") from None


def _hmlstm(cfg: ModelConfig, vocab_size: int, **common):
    import models

    if len(cfg.hidden_sizes) < 2:
        raise ValueError("an HM-LSTM needs at least two layers (model.hidden_sizes = [n, n, ...])")
    return models.HMLSTM(vocab_size, layer_norm=cfg.layer_norm, cell_form=cfg.cell_form, mode=cfg.mode,
                         **common)


def _lstm(cfg: ModelConfig, vocab_size: int, **common):
    import models

    return models.LSTMLM(vocab_size, **common)


MODEL_BUILDERS = {"hmlstm": _hmlstm, "lstm": _lstm}


def build_model(cfg: ModelConfig, vocab_size: int, rng: np.random.Generator):
    """The language model ``cfg`` describes (HM-LSTM or LSTM) for a vocabulary of ``vocab_size``."""
    return MODEL_BUILDERS[cfg.kind](cfg, vocab_size, embed_size=cfg.embed_size,
                                    hidden_sizes=tuple(cfg.hidden_sizes),
                                    output_embed_size=cfg.output_embed_size, rng=rng,
                                    dtype=np.dtype(cfg.dtype))


def corpus_for(cfg: Config):
    """The corpus of ``cfg.data`` (through the token cache)."""
    d = cfg.data
    return load_corpus(d.corpus, d.path, d.encoding, tuple(d.split), d.cache_dir or None)


@dataclass
class OpenRun:
    """A finished or interrupted run reopened from its directory, with a checkpoint loaded."""

    path: RunDir
    cfg: Config
    model: object
    vocab: Vocabulary
    device: str
    checkpoint_name: str
    step: int
    meta: dict

    def corpus(self):
        corpus = corpus_for(self.cfg)
        if corpus.vocab != self.vocab:
            raise RunError(f"the corpus of {self.path.config} now has a different vocabulary than when "
                           "the run was trained; its data files changed")
        return corpus


def open_run(path: str | Path, checkpoint: str = "best", device: str = "auto") -> OpenRun:
    """Reopen run directory ``path`` with its ``checkpoint`` (``best``, ``latest`` or a file)."""
    from .checkpoint import load_checkpoint, read_meta

    run = RunDir(path)
    if not run.config.is_file():
        raise RunError(f"{path} is not a run directory (no config.toml); runs are written by "
                       "python -m train (see --out)")
    cfg = load_config(run.config)
    file = run.checkpoint(checkpoint)
    if not file.is_file() and checkpoint == "best" and run.latest.is_file():
        file = run.latest
    if not file.is_file():
        raise RunError(f"no checkpoint {file} in {path}; the run stopped before its first checkpoint")
    meta = read_meta(file)
    vocab = Vocabulary.from_json(meta["vocabulary"])
    model = build_model(cfg.model, len(vocab), np.random.default_rng(0))
    load_checkpoint(file, model)
    device = pick_device(device)
    model = mf.to_device(model, device)
    if hasattr(model, "slope") and "slope" in meta:
        model.slope = meta["slope"]
    return OpenRun(run, cfg, model, vocab, device, file.stem, int(meta.get("step", 0)), meta)


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every run tool shares: ``--checkpoint`` and ``--device``."""
    parser.add_argument("--checkpoint", default="best",
                        help="best (default), latest, or a path to a checkpoint file")
    parser.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
