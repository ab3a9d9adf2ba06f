"""``metrics.jsonl``: one JSON object per line, appended as training goes.

Every record has ``kind`` (``"train"``, ``"valid"``, ``"lr"``, ``"end"``) and ``step``, and there is
one record per (kind, step): when a run resumes from a checkpoint of step S, the records after S and
the ``end`` record of S are dropped first (those steps are redone; the end record of a run that had
finished at S stays, so its end validation is kept when the run is trained further), and a fresh
start empties the file.
A symbolic link at ``metrics.jsonl`` is followed; anything else that is not a regular file there (a
FIFO, a folder, a device node) is refused with a `FileWriteError` before training starts, and left
as it is.
"""
from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path

from minflux.files import replaced_file, write_atomically

log = logging.getLogger(__name__)


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class MetricsLog:
    """Append-only JSON-lines metrics file.

    >>> import tempfile, pathlib
    >>> log = MetricsLog(pathlib.Path(tempfile.mkdtemp()) / "metrics.jsonl")
    >>> log.write("train", step=1, bpc=2.5); log.write("train", step=2, bpc=2.0)
    >>> log.truncate_after(1); [r["step"] for r in log.read()]
    [1]
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.skipped = 0

    def write(self, kind: str, **fields) -> None:
        target = replaced_file(self.path)  # never append to (or block on) a FIFO or a device
        if not target.is_file():
            write_atomically(target, "")  # created 0644 whatever the umask
        with open(target, "a", encoding="utf-8") as f:
            f.write(json.dumps(_clean({"kind": kind, **fields})) + "\n")

    def read(self) -> list[dict]:
        """Every complete record; lines cut off by a kill or damaged (not UTF-8, not JSON) are
        skipped, and ``skipped`` says how many."""
        self.skipped = 0
        if not self.path.is_file():
            return []
        records = []
        for line in self.path.read_bytes().splitlines():
            try:
                record = json.loads(line.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                self.skipped += 1
                continue
            if isinstance(record, dict) and isinstance(record.get("step"), int):
                records.append(record)
            else:
                self.skipped += 1
        return records

    def truncate_after(self, step: int, keep_end: bool = False) -> None:
        """Drop the records of steps after ``step`` and the ``end`` record of ``step`` (atomically);
        ``keep_end`` keeps that end record (a finished run trained further: its end validation stands)."""
        kept = [r for r in self.read()
                if r["step"] < step or (r["step"] == step and (keep_end or r["kind"] != "end"))]
        if self.skipped:
            log.warning("%s: dropped %d damaged line(s)", self.path, self.skipped)
        write_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))

    def close(self) -> None:
        """Nothing to do: every record is written and closed at once (`train.board.Board` needs it)."""

    def clear(self) -> None:
        """Start the file afresh (a new run in a directory whose earlier attempt never checkpointed)."""
        if os.path.lexists(self.path):
            write_atomically(self.path, "")
