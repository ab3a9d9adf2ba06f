"""Where compiled kernels live on disk, and whether that place can be trusted.

A cached kernel is machine code that the process links and runs, so the cache is only as trusted as
whoever can write to it. The kernel directory is created private to the user (mode 0700); a
directory or file that another user owns, or that its group or others may write to, is never linked
from: minflux warns once and compiles into a private directory of its own for this process instead.

>>> import os, tempfile
>>> private = os.path.join(tempfile.mkdtemp(), "kernels")
>>> kernel_directory(private) == Path(private), oct(os.stat(private).st_mode & 0o777)
(True, '0o700')
"""
from __future__ import annotations

import atexit
import logging
import os
import shutil
import stat
import tempfile
from pathlib import Path

from ..files import remove_temporaries
from . import settings

log = logging.getLogger(__name__)

_checked: dict[Path, Path] = {}
_warned: set[str] = set()


def cache_dir() -> Path:
    """The root of minflux's caches: ``$MINFLUX_CACHE_DIR``, else the user cache dir + ``/minflux``.

    >>> str(cache_dir()).endswith("minflux") or "MINFLUX_CACHE_DIR" in os.environ
    True
    """
    chosen = settings.get("cache_dir")
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "minflux"


def untrusted_reason(path: Path) -> str | None:
    """Why ``path`` (a file or directory) may not be trusted, or None when only its owner can write it.

    >>> untrusted_reason(Path(tempfile.mkdtemp())) is None
    True
    """
    info = os.stat(path)
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"{path} is owned by another user (uid {info.st_uid})"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by its group or by others (mode {oct(info.st_mode & 0o777)})"
    return None


def warn_once(message: str) -> None:
    """Log ``message`` as a warning the first time it is seen in this process."""
    if message not in _warned:
        _warned.add(message)
        log.warning(message)


def _private_fallback(reason: str) -> Path:
    directory = Path(tempfile.mkdtemp(prefix="minflux-kernels-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    warn_once(f"not using the kernel cache: {reason}. Kernels are compiled into {directory} for this "
              "process only; make the cache private (chmod 700, owned by you) or point "
              "MINFLUX_CACHE_DIR at a directory only you can write")
    return directory


def kernel_directory(directory: str | os.PathLike | None = None) -> Path:
    """The directory kernels are read from and written to (default ``cache_dir() / "kernels"``).

    It is created with mode 0700 when missing. When it cannot be created, or is not trusted (see
    `untrusted_reason`), a private temporary directory is used for this process, with one warning.
    """
    directory = Path(directory) if directory is not None else cache_dir() / "kernels"
    found = _checked.get(directory)
    if found is not None:
        return found
    try:
        directory.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        directory.mkdir(exist_ok=True, mode=0o700)
        reason = untrusted_reason(directory)
    except OSError as e:
        reason = f"{directory} cannot be used ({e.strerror or e})"
    if reason is None:
        remove_temporaries(directory, only_dead_writers=True)
        found = directory
    else:
        found = _private_fallback(reason)
    _checked[directory] = found
    return found
