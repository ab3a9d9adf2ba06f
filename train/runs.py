"""A run directory and what it holds; building the model a config describes; reopening a run.

A run directory (``runs/<name>-<date>-<time>`` unless ``--out`` says otherwise) contains::

    config.toml            the resolved config (what --resume and the tools below read)
    metrics.jsonl          one JSON object per line: train / valid / lr / end records
    train.log              the log of every session of the run
    checkpoints/latest.h5  written every train.checkpoint_every steps, at each validation and on exit
    checkpoints/best.h5    the parameters with the best validation bits per character so far
    sample.txt             the sample printed at the end
    .lock                  held (flock) by the process training into the directory; holds its pid

Checkpoints are private to their owner (0600); every other file is 0644.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import minflux as mf
from minflux.backend import DeviceError
from minflux.device import resolve_device

from minflux.files import kind_of, remove_temporaries, write_atomically
from minflux.runtime.allocator import prepare_process

from .config import Config, ConfigError, ModelConfig, TrainConfig, dump_toml, load_config, parse_config
from .data import StreamBatcher, Vocabulary, load_corpus
from .key_rules import resets
from .resume import patched_toml

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
        self.lock = self.path / ".lock"

    def create(self) -> "RunDir":
        """Make the directory and its ``checkpoints`` folder; a path that is not a folder (or cannot
        become one) is a `RunError` naming it.

        >>> import tempfile, pathlib
        >>> file = pathlib.Path(tempfile.mkdtemp()) / "notes.txt"; _ = file.write_text("x")
        >>> RunDir(file).create()
        Traceback (most recent call last):
        ...
        minflux_train.runs.RunError: cannot use .../notes.txt as a run directory: it is a regular file...
        """
        for folder in (self.path, *self.path.parents):
            if os.path.lexists(folder) and not folder.is_dir():
                raise RunError(f"cannot use {self.path} as a run directory: "
                               f"{'it' if folder == self.path else folder} is {kind_of(folder)}; name a "
                               f"folder with --out (a new one is created)")
        try:
            self.checkpoints.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunError(f"cannot create the run directory {self.path}: {exc.strerror or exc}; name "
                           f"another folder with --out") from None
        return self

    @contextlib.contextmanager
    def locked(self):
        """Hold the directory's lock for the block (a second holder gets a `RunError` naming our pid).

        Creates the directory; if it was created here and the block ends before the run wrote its
        config.toml, it is removed again. Temporary files that interrupted writes left are removed.

        >>> import tempfile, pathlib
        >>> run = RunDir(pathlib.Path(tempfile.mkdtemp()) / "r")
        >>> with run.locked():
        ...     with run.locked():
        ...         pass
        Traceback (most recent call last):
        ...
        minflux_train.runs.RunError: ...r is in use by another run (pid ...); wait for it to finish...
        """
        created = not self.path.exists()
        self.create()
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunError(f"{self} is in use by another run (pid {holder}); wait for it to finish, or "
                           f"train into another --out") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            removed = remove_temporaries(self.path) + remove_temporaries(self.checkpoints)
            if removed:
                log.info("removed %d temporary file(s) left by an interrupted write: %s", len(removed),
                         ", ".join(p.name for p in removed))
            yield self
        finally:
            if created and not self.config.is_file():
                with contextlib.suppress(OSError):
                    self.lock.unlink()
                    self.checkpoints.rmdir()
                    self.path.rmdir()
            os.close(fd)

    def write_config(self, cfg: Config, source: str = "") -> None:
        """Write ``cfg`` to config.toml: a fresh file, or the existing one with changed values only
        (so its comments stay)."""
        if self.config.is_file():
            text = self.config.read_text(encoding="utf-8")
            if parse_config(text, str(self.config)) == cfg:
                return
            text = patched_toml(text, cfg)
        else:
            text = (f"# The resolved config of this run{f' ({source})' if source else ''}. --resume reads "
                    f"it; see the README for the keys\n# that may change on resume.\n" + dump_toml(cfg))
        write_atomically(self.config, text)

    def check_files(self) -> None:
        """Refuse a run file (config.toml, metrics.jsonl, train.log, sample.txt, a checkpoint) that is
        there but is not a file (a folder, a FIFO, a device node), naming it: a run would fail to write
        it (or block on it), and ``--resume`` would find no checkpoint. Symbolic links are followed.

        >>> import tempfile, pathlib
        >>> run = RunDir(tempfile.mkdtemp()); run.latest.mkdir(parents=True); run.check_files()
        Traceback (most recent call last):
        ...
        minflux_train.runs.RunError: .../checkpoints/latest.h5 is a folder, not a checkpoint file...
        """
        for file in (self.latest, self.best, self.config, self.metrics, self.log, self.sample):
            if os.path.lexists(file) and not file.is_file():
                what = "a broken symbolic link" if not file.exists() else kind_of(file)
                role = "a checkpoint file" if file.parent == self.checkpoints else "a regular file"
                raise RunError(f"{file} is {what}, not {role}; move it out of {file.parent} (or train "
                               f"into another --out), then run the same command again")

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
        return resolve_device(device, warn=False)  # the run's header names the device it trains on
    except (DeviceError, ValueError) as e:
        raise RunError(f"train.device: {e} (set it with --set train.device=...)") from None


def _hmlstm(cfg: ModelConfig, vocab_size: int, **common):
    import minflux_models
    from minflux_models.boundaries import MIN_LAYERS

    if len(cfg.hidden_sizes) < MIN_LAYERS:
        sizes = ",".join(str(n) for n in cfg.hidden_sizes * MIN_LAYERS)
        lstm = " ".join(["--set model.kind=lstm", *resets(Config(model=cfg), model_kind="lstm")])
        raise ConfigError(f"model.hidden_sizes = {cfg.hidden_sizes}: an HM-LSTM needs at least {MIN_LAYERS} "
                          f"layers (a boundary detector sits between two layers); give {MIN_LAYERS} or more "
                          f"sizes (e.g. --set model.hidden_sizes=[{sizes}]), or train the LSTM baseline "
                          f"with {lstm}")
    return minflux_models.HMLSTM(vocab_size, layer_norm=cfg.layer_norm, cell_form=cfg.cell_form,
                                 mode=cfg.mode, init=cfg.init, **common)


def _lstm(cfg: ModelConfig, vocab_size: int, **common):
    import minflux_models

    return minflux_models.LSTMLM(vocab_size, **common)


MODEL_BUILDERS = {"hmlstm": _hmlstm, "lstm": _lstm}


def build_model(cfg: ModelConfig, vocab_size: int, rng: np.random.Generator):
    """The language model ``cfg`` describes (HM-LSTM or LSTM) for a vocabulary of ``vocab_size``; a
    combination of ``[model]`` keys the model refuses is a `ConfigError`.

    >>> build_model(ModelConfig(kind="hmlstm", hidden_sizes=[8]), 5, np.random.default_rng(0))
    Traceback (most recent call last):
    ...
    minflux_train.config.ConfigError: model.hidden_sizes = [8]: an HM-LSTM needs at least 2 layers ...
    """
    try:
        return MODEL_BUILDERS[cfg.kind](cfg, vocab_size, embed_size=cfg.embed_size,
                                        hidden_sizes=tuple(cfg.hidden_sizes),
                                        output_embed_size=cfg.output_embed_size, rng=rng,
                                        dtype=np.dtype(cfg.dtype))
    except ConfigError:
        raise
    except ValueError as exc:  # the model's own check of a combination of keys
        raise ConfigError(f"[model]: {exc} (change the [model] keys; see docs/config.md)") from None


def corpus_for(cfg: Config):
    """The corpus of ``cfg.data`` (through the token cache); unusable data files are a `RunError`."""
    d = cfg.data
    try:
        return load_corpus(d.corpus, d.path, d.encoding, tuple(d.split), d.cache_dir if d.cache else None)
    except ValueError as exc:  # not UTF-8, a malformed file, too short for its splits...
        raise RunError(f"data: {exc}") from None


def split_tokens(corpus, name: str, cfg: Config) -> np.ndarray:
    """The tokens of split ``name`` of ``corpus``; a split too short to use is a `RunError` that says
    how large the corpus is and which key makes the split larger.

    >>> from minflux_train.data.corpora import Corpus
    >>> corpus = Corpus("text", Vocabulary.from_text("ab"), {"train": np.zeros(9), "valid": np.zeros(1)})
    >>> split_tokens(corpus, "valid", Config())
    Traceback (most recent call last):
    ...
    minflux_train.runs.RunError: data: the valid split has 1 token, and it needs at least 2; ...
    """
    tokens = corpus.splits.get(name)
    if tokens is not None and len(tokens) >= 2:
        return tokens
    d = cfg.data
    total = sum(len(t) for t in corpus.splits.values())
    where = f" ({d.path})" if d.path else ""
    if total == 0:
        raise RunError(f"data: the {d.corpus} corpus{where} holds no text (0 tokens); point data.path at a "
                       f"non-empty file or folder")
    n = 0 if tokens is None else len(tokens)
    needed = cfg.train.batch_size + 3  # batch_size + 1 to train on, 2 to validate
    if total < needed and d.corpus in ("default", "text"):
        fix = (f"the whole corpus{where} has only {total:,} tokens, and a run needs at least {needed} "
               f"(train.batch_size + 1 to train on, 2 to validate): train on a longer text")
    elif d.corpus in ("default", "text"):
        fix = (f"it is cut from {total:,} tokens by data.split = {d.split}: give the {name} split a larger "
               f"fraction (e.g. --set data.split=[0.9,0.05,0.05]) or train on a longer text")
    else:
        fix = f"its file is too short; use the full {d.corpus} files (data.path)"
    raise RunError(f"data: the {name} split has {n:,} token{'s' if n != 1 else ''}, and it needs at least "
                   f"2; {fix}")


def batches(tokens: np.ndarray, cfg: Config):
    """The training windows of ``tokens`` (`StreamBatcher`, tail dropped); a batch the split cannot
    fill is a `ConfigError` naming ``train.batch_size``.

    >>> batches(np.arange(5), Config(train=TrainConfig(batch_size=8, seq_len=2)))
    Traceback (most recent call last):
    ...
    minflux_train.config.ConfigError: train.batch_size = 8: the training split's 5 tokens cannot fill...
    """
    t = cfg.train
    if len(tokens) - 1 < t.batch_size:
        raise ConfigError(f"train.batch_size = {t.batch_size}: the training split's {len(tokens):,} tokens "
                          f"cannot fill {t.batch_size} streams (one token each, plus one); use "
                          f"--set train.batch_size={max(len(tokens) - 1, 1)} or less, or a longer text")
    return StreamBatcher(tokens, t.batch_size, t.seq_len, drop_tail=True)


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


def checkpoint_file(run: RunDir, name: str) -> Path:
    """The checkpoint file ``--checkpoint name`` means in ``run`` (``best`` falls back to ``latest``
    when no best was saved); a name that is not one of them is a `RunError` listing what is accepted.

    >>> import tempfile
    >>> checkpoint_file(RunDir(tempfile.mkdtemp()), "nope")
    Traceback (most recent call last):
    ...
    minflux_train.runs.RunError: --checkpoint nope: no such file; --checkpoint takes best, latest...
    """
    have = [p.stem for p in (run.best, run.latest) if p.is_file()]
    accepted = (f"--checkpoint takes best, latest or the path of a checkpoint file (this run has "
                f"{' and '.join(have) if have else 'none yet'})")
    if name not in ("best", "latest"):
        file = Path(name)
        if file.is_file():
            return file
        what = f"it is {kind_of(file)}" if os.path.lexists(file) else "no such file"
        raise RunError(f"--checkpoint {name}: {what}; {accepted}")
    file = run.checkpoint(name)
    if file.is_file():
        return file
    if name == "best" and run.latest.is_file():
        return run.latest
    if os.path.lexists(file):
        raise RunError(f"{file} is {kind_of(file)}, not a checkpoint file; move it out of {run.checkpoints}")
    if not have:
        raise RunError(f"{run} has no checkpoint in {run.checkpoints}: the run stopped before its first "
                       f"checkpoint")
    raise RunError(f"{run} has no {name} checkpoint ({file}); {accepted}")


def open_run(path: str | Path, checkpoint: str = "best", device: str = "auto") -> OpenRun:
    """Reopen run directory ``path`` with its ``checkpoint`` (``best``, ``latest`` or a file).

    The model is built as the checkpoint's own config describes it (so an edited config.toml cannot
    make it unloadable); everything else comes from the run's config.toml. The process is set up as
    minflux's first computation sets it (BLAS on one thread, `minflux.runtime.allocator`) before the
    model is built: a reopened model computes outside ``gradient``, where its products are numpy's own.
    """
    prepare_process()
    run = RunDir(path)
    if not run.path.is_dir():
        raise RunError(f"no run directory {path}; runs are written by python -m train (see --out)")
    if not run.config.is_file():
        raise RunError(f"{path} is not a run directory (no config.toml); runs are written by "
                       "python -m train (see --out)")
    cfg = load_config(run.config)
    file = checkpoint_file(run, checkpoint)
    meta = mf.io.read(file).meta
    if "vocabulary" not in meta:
        raise mf.io.CheckpointError(f"{file} has no vocabulary in its metadata; it was not written by "
                                    "python -m train")
    vocab = Vocabulary.from_json(meta["vocabulary"])
    trained = parse_config(meta["config"], f"{file} (its config)") if "config" in meta else cfg
    model = build_model(trained.model, len(vocab), np.random.default_rng(0))
    mf.load(file, model=model)
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
