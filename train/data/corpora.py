"""The character corpora: Penn Treebank characters, text8, enwik8, any text file or folder, and the
default corpus that ships with Python itself.

Each corpus knows its source files (`files`, which raises `DatasetNotFoundError` when one is missing)
and how to turn them into a vocabulary and three token arrays (`build`). Caching is not done here.

The default corpus is the text of the standard library's ``pydoc_data/topics.py``: the Python Language
Reference's topics that ``help()`` shows (statements, operators, data model, ...), English prose with
code samples. In CPython 3.11 it is 79 topics in a 757 KB file; joined in sorted order of their names
with a blank line between them they make 465,126 characters (103 distinct), split 90/5/5 into
contiguous train/valid/test parts of 418,613 / 23,256 / 23,257 characters. The exact size varies a
little between Python versions.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .sources import (DATASETS, DatasetNotFoundError, decode_utf8, find_file, read_bytes,
                      text_files_in)
from .vocabulary import Vocabulary

SPLITS = ("train", "valid", "test")
CORPORA = ("default", "ptb", "text8", "enwik8", "text")
DEFAULT_FRACTIONS = (0.9, 0.05, 0.05)
DEFAULT_PATHS = {"default": "", "ptb": "data/ptb", "text8": "data/text8", "enwik8": "data/enwik8",
                 "text": ""}


@dataclass
class Corpus:
    """A tokenised corpus: its vocabulary and the token arrays of the train/valid/test splits.

    >>> c = Corpus("demo", Vocabulary.from_text("ab"), {"train": np.array([0, 1], np.uint8)})
    >>> c.split("train").tolist()
    [0, 1]
    """

    name: str
    vocab: Vocabulary
    splits: dict = field(default_factory=dict)
    description: str = ""
    cache_status: str = ""
    cache_file: Path | None = None

    def split(self, name: str) -> np.ndarray:
        """The tokens of split ``name``; an unknown or empty split is an error naming the ones present."""
        tokens = self.splits.get(name)
        if tokens is None or len(tokens) < 2:
            have = [f"{k} ({len(v):,} tokens)" for k, v in self.splits.items()]
            raise ValueError(f"corpus {self.name!r} has no usable {name!r} split (needs at least 2 "
                             f"tokens); it has {', '.join(have) or 'no splits'}")
        return tokens

    def summary(self) -> str:
        """One line: name, vocabulary size and split sizes."""
        sizes = ", ".join(f"{k} {len(v):,}" for k, v in self.splits.items())
        return f"{self.name}: {len(self.vocab)} symbols ({self.vocab.kind}); {sizes} tokens"


def split_fractions(tokens: np.ndarray, fractions) -> dict:
    """Cut ``tokens`` into contiguous train/valid/test parts of the given fractions (summing to 1).

    The cuts are the conventional ``int(f_train * N)`` and ``int((f_train + f_valid) * N)`` (rounded
    down, as ``data[:int(0.9 * len(data))]`` is usually written), so ``[0.9, 0.1, 0.0]`` of 1,115,394
    characters gives 1,003,854 / 111,540 / 0; a zero test fraction leaves the test split empty.

    >>> {k: v.tolist() for k, v in split_fractions(np.arange(10), (0.8, 0.1, 0.1)).items()}
    {'train': [0, 1, 2, 3, 4, 5, 6, 7], 'valid': [8], 'test': [9]}
    >>> [len(v) for v in split_fractions(np.arange(1_115_394), (0.9, 0.1, 0.0)).values()]
    [1003854, 111540, 0]
    """
    fractions = tuple(float(f) for f in fractions)
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6 or fractions[0] == 0:
        raise ValueError(f"data.split must be three fractions [train, valid, test] that are >= 0 and sum "
                         f"to 1 with train > 0, got {list(fractions)}")
    n = len(tokens)
    train_end = int(fractions[0] * n)
    valid_end = n if fractions[2] == 0 else max(train_end, int((fractions[0] + fractions[1]) * n))
    return {"train": tokens[:train_end], "valid": tokens[train_end:valid_end], "test": tokens[valid_end:]}


def ptb_symbols(text: str, path: Path | str = "<text>") -> str:
    """The symbols of a Penn Treebank character file: space-separated characters, ``_`` between
    words, and ``"\\n"`` for every line end.

    >>> ptb_symbols(" a _ b \\n c \\n")
    'a_b\\nc\\n'
    """
    lines = text.split("\n")
    if lines and not lines[-1].strip():  # the real files end with "\n " (the next line's leading space)
        lines.pop()
    out = []
    for number, line in enumerate(lines, 1):
        symbols = line.split()
        for s in symbols:
            if len(s) != 1:
                raise ValueError(f"{path}:{number}: {s!r} is not a single character; a Penn Treebank "
                                 "character file has characters separated by spaces")
        out.append("".join(symbols))
        out.append("\n")
    return "".join(out)


class DefaultCorpus:
    """The Python documentation topics of ``pydoc_data.topics`` (see the module docstring)."""

    name = "default"

    def __init__(self, path: str = "", encoding: str = "chars", split=DEFAULT_FRACTIONS):
        self.encoding, self.fractions = encoding, split

    def files(self) -> list[Path]:
        try:
            import pydoc_data.topics as topics
        except ImportError as exc:
            raise DatasetNotFoundError(
                "pydoc_data/topics.py", ["the standard library (import pydoc_data.topics)"],
                hint="This Python installation lacks its documentation topics (some distributions "
                     "package them separately). Use another corpus, e.g. --set data.corpus=\"text\" "
                     "--set data.path=SOME_TEXT_FILE.") from exc
        return [Path(topics.__file__)]

    def build(self, files: list[Path]):
        import pydoc_data.topics as topics

        text = "\n\n".join(topics.topics[name] for name in sorted(topics.topics))
        return _encode_and_split(text, self.encoding, self.fractions)


class TextCorpus:
    """Any UTF-8 text file, or every file in a folder (sorted, concatenated), as characters or bytes."""

    name = "text"

    def __init__(self, path: str = "", encoding: str = "chars", split=DEFAULT_FRACTIONS):
        if not path:
            raise ValueError('data.corpus = "text" needs data.path: a text file or a folder of text files')
        self.path, self.encoding, self.fractions = Path(path).expanduser(), encoding, split

    def files(self) -> list[Path]:
        if self.path.is_file():
            return [self.path]
        if self.path.is_dir():
            found = text_files_in(self.path)
            if found:
                return found
            raise DatasetNotFoundError("any non-hidden file", [str(self.path.absolute()) + "/**"])
        raise DatasetNotFoundError(self.path.name, [str(self.path.absolute())])

    def build(self, files: list[Path]):
        raw = [read_bytes(p) for p in files]
        if self.encoding == "bytes":
            return _encode_and_split(b"".join(raw), "bytes", self.fractions)
        text = "".join(decode_utf8(data, p) for data, p in zip(raw, files))
        return _encode_and_split(text, "chars", self.fractions)


class PTBCorpus:
    """Penn Treebank characters from a folder holding ``ptb.char.{train,valid,test}.txt``; the
    vocabulary is every symbol of the three files (about 50, end of line included)."""

    name = "ptb"

    def __init__(self, path: str = "", encoding: str = "chars", split=None):
        self.folder = Path(path or DEFAULT_PATHS["ptb"]).expanduser()

    def files(self) -> list[Path]:
        looked, found = [], []
        for split in SPLITS:
            candidate = self.folder / f"ptb.char.{split}.txt"
            looked.append(str(candidate.absolute()))
            found.append(candidate)
        missing = [p for p, f in zip(looked, found) if not f.is_file()]
        if missing:
            raise DatasetNotFoundError(", ".join(Path(m).name for m in missing), missing, DATASETS["ptb"])
        return found

    def build(self, files: list[Path]):
        texts = [ptb_symbols(decode_utf8(read_bytes(p), p), p) for p in files]
        vocab = Vocabulary.from_text("".join(texts))
        return vocab, {split: vocab.encode(t) for split, t in zip(SPLITS, texts)}


class _HundredMillion:
    """text8 / enwik8: one file (plain or zipped) cut 90/5/5, i.e. 90M/5M/5M for the real file."""

    name = encoding = ""

    def __init__(self, path: str = "", encoding: str = "", split=None):
        self.path = Path(path or DEFAULT_PATHS[self.name]).expanduser()

    def files(self) -> list[Path]:
        return [find_file(self.path, [self.name, self.name + ".zip"], DATASETS[self.name])]

    def build(self, files: list[Path]):
        data = read_bytes(files[0], member=self.name)
        if self.encoding == "chars":
            data = decode_utf8(data, files[0])
        return _encode_and_split(data, self.encoding, DEFAULT_FRACTIONS)


class Text8Corpus(_HundredMillion):
    """text8: the first 10^8 characters of cleaned English Wikipedia (a-z and space)."""

    name, encoding = "text8", "chars"


class Enwik8Corpus(_HundredMillion):
    """enwik8: the first 10^8 bytes of an English Wikipedia XML dump, modelled byte by byte."""

    name, encoding = "enwik8", "bytes"


_KINDS = {"default": DefaultCorpus, "ptb": PTBCorpus, "text8": Text8Corpus, "enwik8": Enwik8Corpus,
          "text": TextCorpus}


def corpus_source(corpus: str, path: str = "", encoding: str = "chars", split=DEFAULT_FRACTIONS):
    """The loader object for corpus kind ``corpus`` (one of `CORPORA`).

    >>> corpus_source("default").files()[0].name
    'topics.py'
    """
    if corpus not in _KINDS:
        raise ValueError(f"unknown corpus {corpus!r}; choose one of {', '.join(CORPORA)}")
    if encoding not in ("chars", "bytes"):
        raise ValueError(f'data.encoding must be "chars" or "bytes", got {encoding!r}')
    return _KINDS[corpus](path, encoding, split)


def _encode_and_split(data, encoding: str, fractions):
    if encoding == "bytes":
        data = data.encode("utf-8") if isinstance(data, str) else data
        vocab = Vocabulary.from_bytes(data)
    else:
        vocab = Vocabulary.from_text(data)
    return vocab, split_fractions(vocab.encode(data), fractions)
