"""A guard against host round trips: device data copied to the host where it should stay on the GPU.

A training step on the GPU should launch kernels and return; every ``float(loss)``, ``int(x.max())``
or ``cupy.asnumpy(...)`` inside it copies device data to the host and makes the host wait for the
device. `no_host_transfers` turns such copies into a `HostTransferError`.

How copies are seen:

- on CuPy, by CuPy's synchronisation detector (the one behind ``cupyx.allow_synchronize``), which
  every device-to-host copy of an ``ndarray`` (``get``, ``float``, ``int``, ``bool``, ``item``,
  ``asnumpy``) and every explicit synchronisation passes through. It can only refuse, so it is armed
  in strict blocks alone: a ``strict=False`` block does not count CuPy copies, and the error says
  that a CuPy copy or synchronisation happened, not which one;
- by `note_transfer`, for an array type that calls it at its conversion points, with a description
  of the copy that the log records and the error names. No minflux code calls it: the tests
  substitute a numpy subclass that calls it from ``__float__``, ``item`` and the like, so the guard
  is exercised without a GPU.

>>> import minflux as mf
>>> with mf.no_host_transfers() as transfers:
...     pass
>>> transfers.count
0
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Iterator

__all__ = ["HostTransferError", "TransferLog", "no_host_transfers", "note_transfer"]

_local = threading.local()


class HostTransferError(RuntimeError):
    """Device data was copied to the host inside a `no_host_transfers` block.

    >>> import minflux as mf
    >>> issubclass(mf.HostTransferError, RuntimeError)
    True
    """


@dataclass(eq=False)
class TransferLog:
    """What a `no_host_transfers` block saw: the number of host copies and a description of each."""

    strict: bool = True
    events: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.events)


def _active() -> list[TransferLog]:
    stack = getattr(_local, "logs", None)
    if stack is None:
        stack = _local.logs = []
    return stack


def note_transfer(what: str) -> None:
    """Report that ``what`` (e.g. ``"float() of a cupy.ndarray"``) copies device data to the host.

    Outside a guard this does nothing; inside a strict guard it raises `HostTransferError`.

    >>> note_transfer("a test copy")             # no guard active: nothing happens
    >>> with no_host_transfers(strict=False) as log:
    ...     note_transfer("a test copy")
    >>> log.events
    ['a test copy']
    """
    stack = _active()
    if not stack:
        return
    for log in stack:
        log.events.append(what)
    if any(log.strict for log in stack):
        raise HostTransferError(_message(what))


def _message(what: str) -> str:
    return (f"{what} inside a no_host_transfers block: device data was copied to the host, which stalls "
            "the GPU once per step. Keep the value on the device (use array ops, e.g. mf.where instead "
            "of a Python `if`, or an xp array instead of float()), or read it outside the step.")


def _cupy_sync_detector():
    """CuPy's thread-local switch that makes device synchronisation raise, or None without CuPy."""
    try:
        from cupy._core import syncdetect  # the module behind cupyx.allow_synchronize
    except Exception:
        return None
    if not hasattr(syncdetect, "_thread_local") or not hasattr(syncdetect, "DeviceSynchronized"):
        return None
    return syncdetect


@contextlib.contextmanager
def _cupy_disallow_sync(syncdetect) -> Iterator[None]:
    local = syncdetect._thread_local
    old = getattr(local, "allowed", True)
    local.allowed = False
    try:
        yield
    except syncdetect.DeviceSynchronized as exc:
        raise HostTransferError(_message("a CuPy device-to-host copy or synchronisation")) from exc
    finally:
        local.allowed = old


@contextlib.contextmanager
def no_host_transfers(strict: bool = True) -> Iterator[TransferLog]:
    """A block in which copying device data to the host is an error (``strict``) or only counted.

    Yields a `TransferLog`. With ``strict=False`` the copies are recorded in the log and allowed;
    CuPy's detector is only armed in strict mode (it can only refuse, not count).

    >>> import minflux as mf
    >>> with mf.no_host_transfers(strict=False) as log:
    ...     mf.transfer_guard.note_transfer("float() of a device array")
    >>> log.count
    1
    """
    log = TransferLog(strict=strict)
    stack = _active()
    stack.append(log)
    try:
        syncdetect = _cupy_sync_detector() if strict else None
        if syncdetect is None:
            yield log
        else:
            with _cupy_disallow_sync(syncdetect):
                yield log
    finally:
        stack.remove(log)
