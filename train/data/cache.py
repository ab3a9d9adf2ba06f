"""An HDF5 cache of a corpus's token arrays and vocabulary, keyed by a fingerprint of its sources.

The cache is never trusted: it is used only when its stored fingerprint (source sizes, modification
times, content hashes, loader options) equals the current one and every token array matches the
checksum stored beside it. Anything else (stale, truncated, not HDF5, missing pieces) is rebuilt. The
file is written to a temporary name and renamed, so a crash never leaves a half-written cache behind.

Caches live under `dataset_cache_dir` (the root of minflux's caches + ``/datasets``) unless a run's
config names another directory (``data.cache_dir``).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Callable

import h5py
import numpy as np

from minflux.runtime.cache_directory import cache_dir

from .vocabulary import Vocabulary

log = logging.getLogger(__name__)

FORMAT_VERSION = 1


def dataset_cache_dir() -> Path:
    """Where token caches go by default: ``$MINFLUX_CACHE_DIR/datasets``, else the user cache
    directory's ``minflux/datasets`` (``~/.cache/minflux/datasets``), beside the kernel cache.

    >>> dataset_cache_dir().parts[-2:] == ("minflux", "datasets") or "MINFLUX_CACHE_DIR" in os.environ
    True
    """
    return cache_dir() / "datasets"


def checksum(tokens: np.ndarray) -> str:
    """BLAKE2b of an array's dtype, shape and bytes.

    >>> checksum(np.array([1, 2], np.uint8)) == checksum(np.array([1, 2], np.uint8))
    True
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{tokens.dtype.str}{tokens.shape}".encode())
    digest.update(np.ascontiguousarray(tokens).tobytes())
    return digest.hexdigest()


def _key(fingerprint: dict) -> str:
    return json.dumps(fingerprint, sort_keys=True)


def read_cache(path: Path, fingerprint: dict):
    """``(vocab, splits)`` from the cache at ``path``, or ``(None, reason)`` when it cannot be used.

    ``reason`` is ``"missing"``, ``"stale"`` or ``"corrupt: ..."``.
    """
    if not path.is_file():
        return None, "missing"
    try:
        with h5py.File(path, "r") as f:
            if f.attrs.get("format_version") != FORMAT_VERSION:
                return None, "stale"
            if f.attrs.get("fingerprint") != _key(fingerprint):
                return None, "stale"
            vocab = Vocabulary.from_json(f.attrs["vocabulary"])
            splits = {}
            for name in json.loads(f.attrs["splits"]):
                dataset = f["tokens"][name]
                tokens = dataset[()]
                if checksum(tokens) != dataset.attrs["checksum"]:
                    return None, f"corrupt: checksum mismatch in split {name!r}"
                if tokens.size and int(tokens.max()) >= len(vocab):
                    return None, f"corrupt: token ids beyond the vocabulary in split {name!r}"
                splits[name] = tokens
    except Exception as exc:  # h5py raises OSError, KeyError, ValueError... for damaged files
        return None, f"corrupt: {type(exc).__name__}: {exc}"
    return (vocab, splits), "hit"


def write_cache(path: Path, fingerprint: dict, vocab: Vocabulary, splits: dict) -> None:
    """Write the cache atomically: to ``<path>.tmp<pid>``, then rename over ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        with h5py.File(tmp, "w") as f:
            f.attrs["format_version"] = FORMAT_VERSION
            f.attrs["fingerprint"] = _key(fingerprint)
            f.attrs["vocabulary"] = vocab.to_json()
            f.attrs["splits"] = json.dumps(list(splits))
            group = f.create_group("tokens")
            for name, tokens in splits.items():
                dataset = group.create_dataset(name, data=tokens)
                dataset.attrs["checksum"] = checksum(tokens)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_cached(path: Path | None, fingerprint: dict, build: Callable):
    """``(vocab, splits, status)``: from the cache when it is valid, else from ``build()`` (then cached).

    ``status`` is ``"hit"``, ``"missing"``, ``"stale"``, ``"corrupt: ..."`` or ``"disabled"`` (when
    ``path`` is None). A cache that cannot be written only costs a warning.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "c.h5"
    >>> build = lambda: (Vocabulary.from_text("ab"), {"train": np.array([0, 1], np.uint8)})
    >>> [load_cached(p, {"v": 1}, build)[2] for _ in range(2)]
    ['missing', 'hit']
    """
    if path is None:
        return (*build(), "disabled")
    cached, status = read_cache(path, fingerprint)
    if cached is not None:
        log.info("token cache hit: %s", path)
        return (*cached, status)
    if status != "missing":
        log.warning("rebuilding token cache %s (%s)", path, status)
    vocab, splits = build()
    try:
        write_cache(path, fingerprint, vocab, splits)
    except OSError as exc:
        log.warning("could not write the token cache %s (%s); continuing without it", path, exc)
    return vocab, splits, status
