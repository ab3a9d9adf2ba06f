"""`load_corpus`: find a corpus's files, then take its tokens from the HDF5 cache or build them."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .cache import dataset_cache_dir, load_cached
from .corpora import DEFAULT_FRACTIONS, Corpus, corpus_source
from .sources import fingerprint

BUILDER_VERSION = 2  # bump when the way tokens are built changes, so old caches count as stale


def load_corpus(corpus: str = "default", path: str = "", encoding: str = "chars",
                split=DEFAULT_FRACTIONS, cache_dir: str | Path | None = "") -> Corpus:
    """Load corpus ``corpus`` (``"default" | "ptb" | "text8" | "enwik8" | "text"``) as token arrays.

    ``path`` is the file or folder to read (ignored by ``"default"``), ``encoding`` is ``"chars"`` or
    ``"bytes"`` (for ``"text"``; text8 is always characters and enwik8 bytes), ``split`` the train/valid/
    test fractions (for ``"default"`` and ``"text"``). Tokens are cached in ``cache_dir`` (``""``: the
    default place, `dataset_cache_dir`; None: no cache).
    The returned corpus has ``cache_status`` set to how the cache was used.

    >>> load_corpus("default", cache_dir=None).vocab.kind
    'chars'
    """
    source = corpus_source(corpus, path, encoding, split)
    files = source.files()
    options = {"corpus": corpus, "encoding": getattr(source, "encoding", encoding),
               "split": list(split) if corpus in ("default", "text") else None,
               "builder_version": BUILDER_VERSION}
    cache_file = None
    if cache_dir is not None:
        where = json.dumps([options, [str(p.resolve()) for p in files]], sort_keys=True)
        name = f"{corpus}-{hashlib.blake2b(where.encode(), digest_size=8).hexdigest()}.h5"
        cache_file = Path(cache_dir or dataset_cache_dir()).expanduser() / name
    key = {**options, "files": fingerprint(files)}
    vocab, splits, status = load_cached(cache_file, key, lambda: source.build(files))
    where_from = ", ".join(str(p) for p in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    return Corpus(corpus, vocab, splits, description=f"{corpus} corpus from {where_from}",
                  cache_status=status, cache_file=cache_file)
