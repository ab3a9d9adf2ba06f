"""Atomic file writes: the old file survives a failed write, and no temporary file is left."""

import pytest

from minflux import files
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

    def full_disk(fd):  # the data was handed to the kernel but cannot reach the disk
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(files.os, "fsync", full_disk)
    with pytest.raises(OSError, match="disk full"):
        write_atomically(target, "new contents")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_a_mode_makes_the_file_private_whatever_the_umask(tmp_path):
    import os
    import stat

    old = os.umask(0o002)
    try:
        write_atomically(tmp_path / "secret", b"x", mode=0o600)
        write_atomically(tmp_path / "shared", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "secret").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "shared").st_mode) == 0o664
