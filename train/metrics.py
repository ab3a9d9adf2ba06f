"""``metrics.jsonl``: one JSON object per line, appended as training goes.

Every record has ``kind`` (``"train"``, ``"valid"``, ``"lr"``, ``"end"``) and ``step``. When a run
resumes from a checkpoint of step S, records after S are dropped first (those steps are redone).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from minflux.files import write_atomically


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

    def write(self, kind: str, **fields) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(_clean({"kind": kind, **fields})) + "\n")

    def read(self) -> list[dict]:
        """Every complete record (a line cut off by a kill is skipped)."""
        if not self.path.is_file():
            return []
        records = []
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return records

    def truncate_after(self, step: int) -> None:
        """Drop the records of steps after ``step`` (atomically rewriting the file)."""
        kept = [r for r in self.read() if r.get("step", 0) <= step]
        write_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))
