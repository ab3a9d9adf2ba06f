"""The vocabulary of a character corpus: symbols (characters or byte values) and their token ids."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

KINDS = ("chars", "bytes")


@dataclass(frozen=True)
class Vocabulary:
    """An ordered set of symbols; token id ``i`` stands for ``symbols[i]``.

    ``kind="chars"``: each symbol is a one-character string (a Penn Treebank end of line is ``"\\n"``).
    ``kind="bytes"``: each symbol is a byte value 0..255 and text is read and written as UTF-8 bytes.

    >>> v = Vocabulary.from_text("hello")
    >>> v.symbols, len(v)
    (('e', 'h', 'l', 'o'), 4)
    >>> v.encode("hole").tolist(), v.decode([1, 0, 2, 2, 3])
    ([1, 3, 2, 0], 'hello')
    """

    symbols: tuple
    kind: str = "chars"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"vocabulary kind must be one of {KINDS}, got {self.kind!r}")
        if len(set(self.symbols)) != len(self.symbols):
            raise ValueError("vocabulary symbols must be distinct")
        object.__setattr__(self, "_index", {s: i for i, s in enumerate(self.symbols)})

    def __len__(self) -> int:
        return len(self.symbols)

    @property
    def token_dtype(self) -> np.dtype:
        """The smallest unsigned integer dtype that holds every token id.

        >>> Vocabulary.from_text("ab").token_dtype
        dtype('uint8')
        """
        return np.dtype(np.uint8 if len(self) <= 256 else np.uint16 if len(self) <= 65536 else np.uint32)

    @classmethod
    def from_text(cls, text: str) -> "Vocabulary":
        """The sorted set of characters occurring in ``text``.

        >>> Vocabulary.from_text("ba").symbols
        ('a', 'b')
        """
        return cls(tuple(chr(c) for c in np.flatnonzero(_codepoint_counts(text))), "chars")

    @classmethod
    def from_bytes(cls, data: bytes) -> "Vocabulary":
        """The sorted set of byte values occurring in ``data``.

        >>> Vocabulary.from_bytes(b"ba").symbols
        (97, 98)
        """
        counts = np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=256)
        return cls(tuple(int(b) for b in np.flatnonzero(counts)), "bytes")

    def encode(self, text: str | bytes) -> np.ndarray:
        """Token ids of ``text`` (a str; bytes too for a byte vocabulary), vectorised.

        A symbol outside the vocabulary is an error that names it.

        >>> Vocabulary.from_bytes(b"ab").encode("ba").tolist()
        [1, 0]
        """
        if self.kind == "bytes":
            data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
            codes = np.frombuffer(data, dtype=np.uint8)
            ids = np.asarray(self.symbols, dtype=np.int64)
        else:
            if not isinstance(text, str):
                raise TypeError(f"a character vocabulary encodes str, got {type(text).__name__}")
            codes = _codes(text)
            ids = np.fromiter((ord(s) for s in self.symbols), dtype=np.int64, count=len(self))
        top = int(max(codes.max(initial=0), ids.max(initial=0))) + 1
        table = np.full(top, -1, dtype=np.int16 if len(self) < 2**15 else np.int64)
        table[ids] = np.arange(len(self))
        tokens = table[codes]
        if tokens.size and tokens.min() < 0:
            bad = codes[np.flatnonzero(tokens < 0)[0]]
            shown = repr(chr(bad)) if self.kind == "chars" else f"byte {int(bad)}"
            raise ValueError(f"{shown} is not in the vocabulary ({len(self)} symbols: "
                             f"{self.describe_symbols()})")
        return tokens.astype(self.token_dtype)

    def decode(self, tokens) -> str:
        """The text of a sequence of token ids (bytes decode as UTF-8, invalid sequences replaced).

        >>> Vocabulary((104, 105), "bytes").decode([0, 1])
        'hi'
        """
        symbols = [self.symbols[int(t)] for t in np.asarray(tokens).ravel()]
        if self.kind == "bytes":
            return bytes(symbols).decode("utf-8", errors="replace")
        return "".join(symbols)

    def describe_symbols(self, limit: int = 60) -> str:
        """A short printable listing of the symbols.

        >>> Vocabulary.from_text("a\\nb").describe_symbols()
        "'\\\\n', 'a', 'b'"
        """
        shown = [repr(s if self.kind == "chars" else chr(s)) for s in self.symbols[:limit]]
        more = f", ... ({len(self) - limit} more)" if len(self) > limit else ""
        return ", ".join(shown) + more

    def to_json(self) -> str:
        """A JSON string that `from_json` turns back into an equal vocabulary.

        >>> v = Vocabulary.from_text("xy"); Vocabulary.from_json(v.to_json()) == v
        True
        """
        return json.dumps({"kind": self.kind, "symbols": list(self.symbols)})

    @classmethod
    def from_json(cls, text: str) -> "Vocabulary":
        """The vocabulary stored by `to_json`.

        >>> Vocabulary.from_json('{"kind": "chars", "symbols": ["a"]}').symbols
        ('a',)
        """
        data = json.loads(text)
        return cls(tuple(data["symbols"]), data["kind"])


def _codepoints(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)


def _codes(text: str) -> np.ndarray:
    """Code points of ``text``, one byte each when it is ASCII (a quarter of the memory)."""
    try:
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    except UnicodeEncodeError:
        return _codepoints(text)


def _codepoint_counts(text: str) -> np.ndarray:
    try:
        data = text.encode("ascii")
    except UnicodeEncodeError:
        return np.bincount(_codepoints(text))
    return np.bincount(np.frombuffer(data, dtype=np.uint8), minlength=128)
