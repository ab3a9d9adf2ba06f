"""Writing files so that a crash never leaves one half-written: a temporary file beside it, then a rename.

`atomic_path` yields the temporary path for writers that want a file name (h5py, matplotlib);
`write_atomically` writes bytes or text through it. Both flush the data to disk before the rename,
give the file exactly the permissions ``mode`` (0644 unless told otherwise, 0600 for private files
such as checkpoints) and turn a failed write (a full disk, a file-size limit, no permission) into one
`FileWriteError` that names the file and the free space; the previous file is then unchanged.

A symbolic link is followed (the file it points to is replaced, the link stays), and anything at the
path that is not a regular file (a folder, a FIFO, a device node, a socket) is refused with a
`FileWriteError` and left as it is.

Temporary files are named ``.<name>.<pid>-<thread>.tmp``. A process killed while writing leaves one
behind; `remove_temporaries` deletes those of a folder (call it when no other process writes there).
"""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import threading
from pathlib import Path
from typing import Iterator

__all__ = ["FileWriteError", "atomic_path", "is_temporary", "kind_of", "remove_temporaries", "replaced_file",
           "write_atomically"]

_TEMPORARY = re.compile(r"^\..+\.\d+-\d+\.tmp$")
_LEGACY_TEMPORARY = re.compile(r"^.+\.h5\.tmp[A-Za-z0-9_]{1,12}$")  # mkstemp names of older checkpoints
_REASONS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "the disk quota is exceeded",
            errno.EFBIG: "the file would exceed the file-size limit (ulimit -f)"}


class FileWriteError(OSError):
    """A file could not be written; the message names it and the free space, and the old file is intact.

    >>> str(FileWriteError("cannot write a.txt: no space left on the device"))
    'cannot write a.txt: no space left on the device'
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _size(n: int) -> str:
    for unit in ("bytes", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def _free_space(folder: Path) -> str:
    for candidate in (folder, *folder.parents):
        try:
            return f"{_size(shutil.disk_usage(candidate).free)} free in {candidate}"
        except OSError:
            continue
    return "free space unknown"


def _write_error(path: Path, exc: OSError) -> FileWriteError:
    reason = _REASONS.get(exc.errno, exc.strerror or str(exc))
    error = FileWriteError(f"cannot write {path}: {reason} ({_free_space(path.parent)}); the previous "
                           f"file, if any, is unchanged")
    error.errno, error.filename = exc.errno, str(path)
    return error


def _fsync(path: Path, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    except OSError:
        if not directory:  # some file systems cannot sync a folder; the rename is still atomic
            raise
    finally:
        os.close(fd)


_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def kind_of(path) -> str:
    """What is at ``path`` (symbolic links followed), in words: ``"a regular file"``, ``"a folder"``,
    ``"a FIFO (named pipe)"``, a device, a socket, or ``"nothing"``.

    >>> import tempfile
    >>> kind_of(tempfile.mkdtemp()), kind_of("/no/such/file")
    ('a folder', 'nothing')
    """
    try:
        kind = stat.S_IFMT(os.stat(path).st_mode)
    except FileNotFoundError:
        return "nothing"
    return "a regular file" if kind == stat.S_IFREG else _KINDS.get(kind, "not a regular file")


def replaced_file(path) -> Path:
    """The file a write to ``path`` replaces: ``path``, or the file its symbolic links lead to.

    Raises `FileWriteError` when something other than a regular file is there (a folder, a FIFO, a
    device node, a socket), or when a link leads into a folder that does not exist.

    >>> import os, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "real.txt").touch(); os.symlink("real.txt", d / "link")
    >>> replaced_file(d / "link").name, replaced_file(d / "new.txt").name
    ('real.txt', 'new.txt')
    >>> os.mkfifo(d / "pipe"); replaced_file(d / "pipe")
    Traceback (most recent call last):
    ...
    minflux.files.FileWriteError: cannot write .../pipe: it is a FIFO (named pipe), not a regular file; ...
    """
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        kind = stat.S_IFMT(os.stat(target).st_mode)
    except FileNotFoundError:
        if target is not path and not target.parent.is_dir():
            raise FileWriteError(f"cannot write {path}: it is a symbolic link to {target}, whose folder "
                                 f"does not exist; nothing was written (fix or remove the link)") from None
        return target
    except OSError as exc:
        raise _write_error(path, exc) from exc
    if kind != stat.S_IFREG:
        what = kind_of(target)
        via = f" (through the symbolic link to {target})" if target is not path else ""
        raise FileWriteError(f"cannot write {path}: it is {what}{via}, not a regular file; it was left as "
                             f"it is (move it away, or write somewhere else)")
    return target


@contextlib.contextmanager
def atomic_path(path, mode: int = 0o644) -> Iterator[Path]:
    """A temporary path beside ``path``; when the block ends without an error it becomes ``path``.

    Missing parent folders are created. A symbolic link is followed (see `replaced_file`: what is
    not a regular file is refused). If the block raises, the temporary file is removed and the
    old ``path`` is unchanged; an `OSError` becomes a `FileWriteError` naming ``path``.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "numbers.txt"
    >>> with atomic_path(target) as tmp:
    ...     _ = tmp.write_text("1 2 3")
    >>> target.read_text(), oct(target.stat().st_mode & 0o777)
    ('1 2 3', '0o644')
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _write_error(path, exc) from exc
    path = replaced_file(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.chmod(tmp, mode)
        _fsync(tmp)
        os.replace(tmp, path)
        _fsync(path.parent, directory=True)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, FileWriteError):
            raise _write_error(path, exc) from exc
        raise


def write_atomically(path, data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through a temporary file and a rename.

    Readers see the old file or the new one, never a part (see `atomic_path`).

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "page.html"
    >>> _ = write_atomically(target, "<p>hi</p>"); target.read_text()
    '<p>hi</p>'
    """
    payload = data if isinstance(data, bytes) else data.encode("utf-8")
    with atomic_path(path, mode) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)
    return Path(path)


def is_temporary(name: str) -> bool:
    """Whether ``name`` is a temporary file of `atomic_path` (or of an older checkpoint writer).

    >>> is_temporary(".latest.h5.4242-140.tmp"), is_temporary("latest.h5.tmpa1b2c3"), is_temporary("a.h5")
    (True, True, False)
    """
    return bool(_TEMPORARY.match(name) or _LEGACY_TEMPORARY.match(name))


def _writer_alive(name: str) -> bool:
    """Whether the process that named temporary file ``name`` (``.<name>.<pid>-<thread>.tmp``) runs."""
    match = _TEMPORARY.match(name) and re.search(r"\.(\d+)-\d+\.tmp$", name)
    if not match:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_temporaries(folder, only_dead_writers: bool = False) -> list[Path]:
    """Delete the temporary files that interrupted writes left in ``folder``; returns what was removed.

    Only safe while no other process writes into ``folder``, unless ``only_dead_writers`` keeps the
    files of processes that are still running.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / ".a.txt.1-2.tmp").write_text("x")
    >>> [p.name for p in remove_temporaries(d)], list(d.iterdir())
    (['.a.txt.1-2.tmp'], [])
    """
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for entry in sorted(folder.iterdir()):
        if entry.is_file() and is_temporary(entry.name):
            if only_dead_writers and _writer_alive(entry.name):
                continue
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
                removed.append(entry)
    return removed
