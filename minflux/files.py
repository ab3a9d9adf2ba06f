"""Writing a file so that a crash never leaves it half-written: a temporary file, then a rename."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomically(path, data: str | bytes, mode: int | None = None) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through a temporary file and a rename.

    Readers see the old file or the new one, never a part; the data reaches the disk (fsync) before
    the rename, the temporary file sits beside ``path`` (same file system) and is removed if writing
    fails. Missing parent folders are created. ``mode`` sets the file's permissions (e.g. ``0o600``
    for a private file); by default they follow the umask as for any new file.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "page.html"
    >>> _ = write_atomically(target, "<p>hi</p>"); target.read_text()
    '<p>hi</p>'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    payload = data if isinstance(data, bytes) else data.encode("utf-8")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
