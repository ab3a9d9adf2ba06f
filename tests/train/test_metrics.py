"""metrics.jsonl: a symbolic link there is followed, anything else that is not a regular file is
refused before training, and what the user put there is never replaced."""
import json
import os
import stat

import pytest

from minflux.files import FileWriteError
from minflux_train.__main__ import main
from minflux_train.metrics import MetricsLog

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_a_symbolic_link_is_followed_by_every_write(tmp_path):
    real = tmp_path / "elsewhere" / "metrics.jsonl"
    real.parent.mkdir()
    link = tmp_path / "metrics.jsonl"
    os.symlink(real, link)
    log = MetricsLog(link)
    log.clear()
    log.write("train", step=1, bpc=2.0)
    log.write("train", step=2, bpc=1.5)
    log.truncate_after(1)
    log.write("valid", step=1, bpc=1.8)
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert [(r["kind"], r["step"]) for r in map(json.loads, real.read_text().splitlines())] == \
        [("train", 1), ("valid", 1)]


@pytest.mark.parametrize("operation", ["clear", "write", "truncate_after"])
def test_a_fifo_is_refused_and_left_in_place(tmp_path, operation):
    fifo = tmp_path / "metrics.jsonl"
    os.mkfifo(fifo)
    log = MetricsLog(fifo)
    call = {"clear": lambda: log.clear(), "write": lambda: log.write("train", step=1),
            "truncate_after": lambda: log.truncate_after(0)}[operation]
    with pytest.raises(FileWriteError, match=r"metrics.jsonl: it is a FIFO \(named pipe\), not a regular "
                                             r"file; it was left as it is"):
        call()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


@pytest.mark.parametrize("name", ["metrics.jsonl", "train.log", "sample.txt", "config.toml"])
def test_a_run_refuses_a_fifo_at_a_run_file_before_training(cfg, tmp_path, tiny_model, capsys, name):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / name)
    status = main(["--config", str(cfg), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert status == 1 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("error:")] == [
        f"error: {out / name} is a FIFO (named pipe), not a regular file; move it out of {out} (or train "
        "into another --out), then run the same command again"]
    assert stat.S_ISFIFO(os.lstat(out / name).st_mode)
    assert not (out / "checkpoints" / "latest.h5").exists()  # refused before the first step


def test_a_dangling_link_is_followed_not_replaced(tmp_path):
    link = tmp_path / "metrics.jsonl"
    os.symlink(tmp_path / "target.jsonl", link)
    MetricsLog(link).write("train", step=1)
    assert link.is_symlink() and (tmp_path / "target.jsonl").read_text().startswith('{"kind": "train"')
