"""Source files of a corpus: finding them, fingerprinting them, reading them (plain or zipped).

Nothing here downloads. A missing file is a `DatasetNotFoundError` that names the file, every place it
was looked for, and where the dataset can be obtained.
"""
from __future__ import annotations

import hashlib
import zipfile
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DatasetInfo:
    """Where a public dataset comes from, for error messages."""

    title: str
    url: str
    size: str


DATASETS = {
    "ptb": DatasetInfo(
        "Penn Treebank characters",
        "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz",
        "a 34 MB archive; unpack data/ptb.char.train.txt (about 10 MB), ptb.char.valid.txt (786 KB) and "
        "ptb.char.test.txt (885 KB) into one folder"),
    "text8": DatasetInfo(
        "text8", "http://mattmahoney.net/dc/text8.zip",
        "31 MB zipped; text8 itself is 100,000,000 bytes (either file works)"),
    "enwik8": DatasetInfo(
        "enwik8", "http://mattmahoney.net/dc/enwik8.zip",
        "36 MB zipped; enwik8 itself is 100,000,000 bytes (either file works)"),
}


class DatasetNotFoundError(FileNotFoundError):
    """A corpus file is missing; the message says where it was looked for and how to get it.

    >>> err = DatasetNotFoundError("text8", ["/data/text8", "/data/text8.zip"], DATASETS["text8"])
    >>> "mattmahoney.net" in str(err) and "/data/text8.zip" in str(err)
    True
    """

    def __init__(self, name: str, looked: list, info: DatasetInfo | None = None, hint: str = ""):
        lines = [f"dataset file not found: {name}", "  looked for:"]
        lines += [f"    {p}" for p in looked]
        if info is not None:
            lines.append(f"  {info.title} is available from {info.url} ({info.size}).")
            lines.append("  Nothing is downloaded automatically; fetch it yourself and point the config at it "
                         "with data.path (for example --set data.path=/path/to/folder).")
        if hint:
            lines.append(f"  {hint}")
        super().__init__("\n".join(lines))


def find_file(path: str | Path, names: list[str], info: DatasetInfo | None = None) -> Path:
    """``path`` itself when it is a file, else the first of ``names`` found inside folder ``path``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "b.txt").write_text("x")
    1
    >>> find_file(d, ["a.txt", "b.txt"]).name
    'b.txt'
    """
    path = Path(path).expanduser()
    if path.is_file():
        return path
    looked = [path / n for n in names]
    for candidate in looked:
        if candidate.is_file():
            return candidate
    raise DatasetNotFoundError(" or ".join(names), [str(p.absolute()) for p in looked], info)


def read_bytes(path: Path, member: str | None = None) -> bytes:
    """The bytes of ``path``; for a ``.zip``, of its member ``member`` (or its only file).

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"; _ = p.write_bytes(b"abc")
    >>> read_bytes(p)
    b'abc'
    """
    if path.suffix.lower() != ".zip":
        return path.read_bytes()
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if not n.endswith("/")]
            if member is None and len(names) == 1:
                member = names[0]
            if member not in names:
                raise ValueError(f"{path} does not contain {member!r}; it holds {names[:10]}")
            return archive.read(member)
    except zipfile.BadZipFile as exc:
        raise ValueError(f"{path} is not a valid zip archive ({exc}); download it again") from exc


def decode_utf8(data: bytes, path: Path) -> str:
    """``data`` as UTF-8 text; invalid bytes give an error naming the file, the offset and the fix.

    >>> decode_utf8(b"ok", Path("f.txt"))
    'ok'
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path} is not UTF-8 text (invalid byte at offset {exc.start}); "
                         f'read it as bytes instead with data.encoding = "bytes"') from exc


def fingerprint(paths: list[Path]) -> list[dict]:
    """Size, modification time and BLAKE2b hash of each file: what a cache entry is keyed by.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.txt"; _ = p.write_bytes(b"abc")
    >>> fp = fingerprint([p])[0]; fp["size"], len(fp["blake2b"])
    (3, 32)
    """
    out = []
    for path in paths:
        stat = path.stat()
        digest = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            while chunk := f.read(1 << 24):
                digest.update(chunk)
        out.append({"path": str(path.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns,
                    "blake2b": digest.hexdigest()})
    return out


def text_files_in(folder: Path) -> list[Path]:
    """Every regular, non-hidden file under ``folder``, in sorted order of relative path.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "b").write_text("1"); _ = (d / ".h").write_text("2")
    >>> [p.name for p in text_files_in(d)]
    ['b']
    """
    files = [p for p in folder.rglob("*")
             if p.is_file() and not any(part.startswith(".") for part in p.relative_to(folder).parts)]
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())
