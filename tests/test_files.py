"""Atomic file writes: the old file survives a failed write, and no temporary file is left."""
from pathlib import Path

import pytest

from minflux.files import write_atomically


def test_text_and_bytes_replace_the_file(tmp_path):
    target = tmp_path / "deep" / "f.txt"
    write_atomically(target, "old")
    write_atomically(target, b"new\x00")
    assert target.read_bytes() == b"new\x00"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.txt"]


def test_a_failed_write_keeps_the_old_file_and_removes_the_temporary(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    target.write_text("old")
    real_write = Path.write_text

    def half_write(self, data, **kw):
        real_write(self, data[:1], **kw)
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(Path, "write_text", half_write)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, "new contents")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]
