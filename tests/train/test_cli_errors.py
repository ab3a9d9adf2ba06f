"""Expected errors of every tool are one line with status 1 or 2; a second run into a directory, a full
disk and a hard kill are handled in real child processes."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import minflux as mf
import minflux_train.plot
from minflux_train.__main__ import main as train_main
from minflux_train.boundaries import main as boundaries_main
from minflux_train.evaluate import main as evaluate_main
from minflux_train.loop import Trainer
from minflux_train.runs import RunDir
from minflux_train.sample import main as sample_main

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

RUN_TINY = Path(__file__).with_name("run_tiny.py")


@pytest.fixture
def run_dir(cfg, tmp_path, tiny_model):
    out = tmp_path / "run"
    assert train_main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=6", "--quiet"]) == 0
    return out


def one_error_line(capsys, status, expected):
    assert status == 1  # what the README promises for every tool
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert expected in errors[0], errors[0]
    return errors[0]


def flip_a_byte_of(path: Path):
    """Flip a byte inside the stored data of the checkpoint's largest array (a byte of free space
    or padding would change nothing a reader sees)."""
    import h5py

    with h5py.File(path, "r") as f:
        arrays = []
        f.visititems(lambda name, obj: arrays.append(obj) if isinstance(obj, h5py.Dataset) else None)
        largest = max(arrays, key=lambda d: d.id.get_storage_size())
        offset = largest.id.get_offset() + largest.id.get_storage_size() // 2
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0xFF
    path.write_bytes(bytes(raw))


def test_train_with_a_binary_config(tmp_path, capsys):
    (tmp_path / "x.toml").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    one_error_line(capsys, train_main(["--config", str(tmp_path / "x.toml")]), "it is not UTF-8 text")


def test_train_on_a_corpus_that_is_not_utf8(cfg, tmp_path, tiny_model, capsys):
    (tmp_path / "corpus.txt").write_bytes(b"abc\xff\xfe" * 200)
    status = train_main(["--config", str(cfg), "--out", str(tmp_path / "run")])
    one_error_line(capsys, status, "is not UTF-8 text")
    assert not (tmp_path / "run").exists()  # nothing is left of a run that never started


def test_resume_of_a_missing_run_dir(tmp_path, capsys):
    status = train_main(["--out", str(tmp_path / "nowhere"), "--resume"])
    one_error_line(capsys, status, "has no config.toml")


def test_resume_from_a_damaged_checkpoint(run_dir, capsys):
    flip_a_byte_of(RunDir(run_dir).latest)
    one_error_line(capsys, train_main(["--out", str(run_dir), "--resume"]), "is damaged")


def test_resume_from_a_checkpoint_without_step(run_dir, capsys):
    run = RunDir(run_dir)
    meta = mf.io.read(run.latest).meta
    del meta["step"]
    mf.save(run.latest, model={"w": np.zeros(1)}, **meta)
    one_error_line(capsys, train_main(["--out", str(run_dir), "--resume"]), "its metadata lacks step")


def test_resume_after_the_corpus_changed_says_different_vocabulary(run_dir, tmp_path, capsys):
    (tmp_path / "corpus.txt").write_text("entirely new text with other letters: xyzqj! " * 20)
    status = train_main(["--out", str(run_dir), "--resume"])
    one_error_line(capsys, status, "the corpus now has a different vocabulary")


def test_ctrl_c_during_start_up_does_not_claim_a_checkpoint(cfg, tmp_path, tiny_model, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "__init__", interrupted)
    assert train_main(["--config", str(cfg), "--out", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err
    assert "nothing was saved" in err and "last checkpoint" not in err


@pytest.mark.parametrize("tool", [evaluate_main, sample_main, minflux_train.plot.main])
def test_tools_on_a_missing_run_dir(tool, tmp_path, capsys):
    one_error_line(capsys, tool([str(tmp_path / "nowhere")]), str(tmp_path / "nowhere"))


def test_boundaries_on_a_missing_run_dir(tmp_path, capsys):
    status = boundaries_main([str(tmp_path / "nowhere"), "--text", "a"])
    one_error_line(capsys, status, "no run directory")


@pytest.mark.parametrize("tool, extra", [(evaluate_main, []), (sample_main, []),
                                         (boundaries_main, ["--text", "the"])])
def test_tools_on_a_damaged_checkpoint(tool, extra, run_dir, capsys):
    flip_a_byte_of(RunDir(run_dir).best)
    one_error_line(capsys, tool([str(run_dir), *extra]), "is damaged")


def test_tools_on_a_checkpoint_of_another_model(run_dir, capsys):
    other = RunDir(run_dir).best
    mf.save(other, model={"w": np.zeros(3)}, **mf.io.read(other).meta)
    line = one_error_line(capsys, evaluate_main([str(run_dir)]), "does not match the target")
    assert "first: model array" in line


def test_sample_with_a_prime_outside_the_vocabulary(run_dir, capsys):
    status = sample_main([str(run_dir), "--prime", "zebra ü"])
    one_error_line(capsys, status, "--prime: 'z' is not in the vocabulary")


def test_boundaries_with_text_outside_the_vocabulary(run_dir, capsys):
    status = boundaries_main([str(run_dir), "--text", "quiz"])
    one_error_line(capsys, status, "is not in the vocabulary")


def test_plot_skips_bad_bytes_in_metrics_and_says_so(run_dir, capsys, monkeypatch):
    metrics = RunDir(run_dir).metrics
    metrics.write_bytes(metrics.read_bytes() + b'{"kind": "train", "st\xff\xfe\n\x00\x01garbage\n')
    records = minflux_train.plot.MetricsLog(metrics).read()
    log = minflux_train.plot.MetricsLog(metrics)
    assert log.read() == records and log.skipped == 2 and records
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    status = minflux_train.plot.main([str(run_dir)])
    one_error_line(capsys, status, "needs matplotlib")


def run_tiny(*args, env=None, **kwargs):
    full_env = {**os.environ, **(env or {})}
    return subprocess.Popen([sys.executable, str(RUN_TINY), *map(str, args)], env=full_env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def test_a_second_run_into_the_same_directory_is_refused_naming_the_first(cfg, tmp_path):
    out = tmp_path / "run"
    first = run_tiny("--config", cfg, "--out", out, "--set", "train.max_steps=400",
                     env={"RUN_TINY_STEP_SECONDS": "0.05"})
    try:
        deadline = time.monotonic() + 60
        while not (out / "config.toml").is_file() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = run_tiny("--config", cfg, "--out", out, "--resume")
        _, err = second.communicate(timeout=60)
        assert second.returncode == 1
        assert f"is in use by another run (pid {first.pid})" in err.splitlines()[-1]
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 130  # stopped by SIGTERM after saving
    keys = [line for line in RunDir(out).metrics.read_text().splitlines()]
    assert len(keys) == len(set(keys))


def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_last_checkpoint(cfg, tmp_path):
    out = tmp_path / "run"
    done = run_tiny("--config", cfg, "--out", out, "--set", "train.max_steps=6", "--quiet")
    assert done.wait(timeout=120) == 0
    latest = RunDir(out).latest
    before = latest.read_bytes()
    assert len(before) > 12_000
    full = run_tiny("--out", out, "--resume", "--set", "train.max_steps=12",
                    env={"RUN_TINY_FSIZE": "12000"})
    _, err = full.communicate(timeout=120)
    assert full.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"error: cannot write {latest}: the file would exceed the file-size limit")
    assert " free in " in last and "Traceback" not in err
    assert latest.read_bytes() == before
    assert sorted(p.name for p in latest.parent.iterdir()) == ["best.h5", "latest.h5"]


@pytest.mark.slow
def test_sigkill_anywhere_then_resume_matches_an_uninterrupted_run(cfg, tmp_path):
    args = ["--config", cfg, "--set", "train.epochs=3", "--set", "train.max_steps=40", "--quiet"]
    whole = run_tiny(*args, "--out", tmp_path / "whole")
    assert whole.wait(timeout=120) == 0
    split = tmp_path / "split"
    victim = run_tiny(*args, "--out", split, env={"RUN_TINY_STEP_SECONDS": "0.02"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (split / "metrics.jsonl").is_file() and '"step": 24' in (split / "metrics.jsonl").read_text():
            break
        time.sleep(0.01)
    victim.kill()  # SIGKILL: no handler runs
    victim.communicate()
    resumed = run_tiny("--out", split, "--resume", "--quiet")
    assert resumed.wait(timeout=120) == 0
    a, b = mf.io.read(RunDir(tmp_path / "whole").latest), mf.io.read(RunDir(split).latest)
    assert a.meta["step"] == b.meta["step"] == 40 and a.meta["epoch"] == 2
    for name in a.model:
        assert np.array_equal(a.model[name], b.model[name]), name


@pytest.mark.parametrize("inside", [False, True])
def test_out_naming_an_existing_file_is_one_line(cfg, tmp_path, capsys, inside):
    file = tmp_path / "notes.txt"
    file.write_text("mine")
    out = file / "run" if inside else file
    line = one_error_line(capsys, train_main(["--config", str(cfg), "--out", str(out)]),
                          f"cannot use {out} as a run directory: ")
    assert f"{'it' if not inside else file} is a regular file; name a folder with --out" in line
    assert file.read_text() == "mine"


def test_evaluate_with_an_unknown_checkpoint_lists_the_accepted_names(run_dir, capsys):
    line = one_error_line(capsys, evaluate_main([str(run_dir), "--checkpoint", "nope"]), "--checkpoint nope")
    assert line == ("error: --checkpoint nope: no such file; --checkpoint takes best, latest or the path of a "
                    "checkpoint file (this run has best and latest)")
    assert "stopped before its first checkpoint" not in line
    RunDir(run_dir).latest.unlink()
    line = one_error_line(capsys, evaluate_main([str(run_dir), "--checkpoint", "latest"]), "no latest checkpoint")
    assert line.endswith("(this run has best)")


def test_a_checkpoint_path_that_is_a_folder_says_so(run_dir, tmp_path, capsys):
    one_error_line(capsys, sample_main([str(run_dir), "--checkpoint", str(tmp_path)]),
                   f"--checkpoint {tmp_path}: it is a folder; --checkpoint takes best, latest")


@pytest.mark.parametrize("name, write, expected", [
    ("missing.txt", None, "--file {path}: cannot read it: No such file or directory"),
    ("binary.txt", b"\xff\xfe\x00", "--file {path} is not UTF-8 text (byte 0)"),
    ("foreign.txt", "qqq zzz".encode(), "--file {path}: 'q' is not in the vocabulary"),
])
def test_boundaries_data_errors_are_one_line_with_status_1(run_dir, tmp_path, capsys, name, write, expected):
    path = tmp_path / name
    if write is not None:
        path.write_bytes(write)
    status = boundaries_main([str(run_dir), "--file", str(path)])
    line = one_error_line(capsys, status, expected.format(path=path))
    assert "[Errno" not in line


@pytest.mark.parametrize("tool, argv", [(evaluate_main, ["--batch-size", "-3"]),
                                        (boundaries_main, ["--text", "the", "--width", "0"]),
                                        (boundaries_main, ["--file", "x.txt", "--batch-size", "0"])])
def test_sizes_below_one_are_refused_not_replaced(run_dir, capsys, tool, argv):
    with pytest.raises(SystemExit) as exited:
        tool([str(run_dir), *argv])
    assert exited.value.code == 2 and "must be >= 1" in capsys.readouterr().err
