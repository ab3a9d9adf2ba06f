"""Atomic file writes: the old file survives a failed write, no temporary file is left, and the
permissions are the ones asked for whatever the umask."""
import errno
import os

import pytest

from minflux.files import FileWriteError, atomic_path, remove_temporaries, write_atomically


def test_text_and_bytes_replace_the_file(tmp_path):
    target = tmp_path / "deep" / "f.txt"
    write_atomically(target, "old")
    write_atomically(target, b"new\x00")
    assert target.read_bytes() == b"new\x00"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.txt"]


def test_a_full_disk_keeps_the_old_file_and_names_the_path_and_the_free_space(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    target.write_text("old")
    real_write = os.write

    def half_write(fd, data):
        real_write(fd, bytes(data[:1]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_write)
    with pytest.raises(FileWriteError) as caught:
        write_atomically(target, "new contents")
    message = str(caught.value)
    assert message.startswith(f"cannot write {target}: no space left on the device (")
    assert f"free in {tmp_path}" in message and "unchanged" in message and "\n" not in message
    assert caught.value.errno == errno.ENOSPC
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]


def test_an_error_inside_atomic_path_keeps_the_old_file(tmp_path):
    target = tmp_path / "plot.png"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="drawing failed"):
        with atomic_path(target) as tmp:
            tmp.write_bytes(b"half")
            raise RuntimeError("drawing failed")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["plot.png"]


@pytest.mark.parametrize("umask", [0o000, 0o002, 0o077])
def test_permissions_are_exactly_the_mode_asked_for(tmp_path, umask):
    old = os.umask(umask)
    try:
        public = write_atomically(tmp_path / "public.txt", "x")
        private = write_atomically(tmp_path / "private.bin", b"x", mode=0o600)
    finally:
        os.umask(old)
    assert public.stat().st_mode & 0o777 == 0o644
    assert private.stat().st_mode & 0o777 == 0o600


def test_leftover_temporaries_are_removed_and_nothing_else(tmp_path):
    names = [".latest.h5.123-456.tmp", "latest.h5.tmpab12_x", ".metrics.jsonl.9-1.tmp", "latest.h5",
             "notes.tmp", ".hidden"]
    for name in names:
        (tmp_path / name).write_text("x")
    removed = sorted(p.name for p in remove_temporaries(tmp_path))
    assert removed == [".latest.h5.123-456.tmp", ".metrics.jsonl.9-1.tmp", "latest.h5.tmpab12_x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".hidden", "latest.h5", "notes.tmp"]


def test_temporaries_of_running_writers_can_be_kept(tmp_path):
    import os

    from minflux.files import remove_temporaries

    mine = tmp_path / f".a.txt.{os.getpid()}-1.tmp"
    dead = tmp_path / ".b.txt.999999999-1.tmp"
    for p in (mine, dead):
        p.write_text("x")
    assert remove_temporaries(tmp_path, only_dead_writers=True) == [dead]
    assert mine.exists()


def test_a_symbolic_link_is_followed_and_stays_a_link(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    os.symlink("real.txt", tmp_path / "link.txt")
    write_atomically(tmp_path / "link.txt", "new")
    assert os.readlink(tmp_path / "link.txt") == "real.txt" and real.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "real.txt"]


@pytest.mark.parametrize("make, what", [(os.mkfifo, "a FIFO (named pipe)"), (os.mkdir, "a folder")])
def test_what_is_not_a_regular_file_is_refused_and_left_as_it_is(tmp_path, make, what):
    target = tmp_path / "metrics.jsonl"
    make(target)
    kind = os.lstat(target).st_mode
    with pytest.raises(FileWriteError, match=f"it is {what.replace('(', '.').replace(')', '.')}, not a "
                                             "regular file; it was left as it is"):
        write_atomically(target, "x")
    assert os.lstat(target).st_mode == kind and [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_a_link_to_a_fifo_is_refused(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    os.symlink("pipe", tmp_path / "link")
    with pytest.raises(FileWriteError, match="through the symbolic link to"):
        write_atomically(tmp_path / "link", "x")
    assert (tmp_path / "link").is_symlink()
