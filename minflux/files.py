"""Writing a file so that a crash never leaves it half-written: a temporary file, then a rename."""
from __future__ import annotations

import os
import threading
from pathlib import Path


def write_atomically(path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` through a temporary file and a rename.

    Readers see the old file or the new one, never a part; the temporary file sits beside ``path``
    (same file system) and is removed if writing fails. Missing parent folders are created.

    >>> import tempfile, pathlib
    >>> target = pathlib.Path(tempfile.mkdtemp()) / "page.html"
    >>> _ = write_atomically(target, "<p>hi</p>"); target.read_text()
    '<p>hi</p>'
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
