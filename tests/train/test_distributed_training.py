"""``mpiexec -n 2 python -m train``: the same parameters as one process with the same global batch,
bit-identical reruns, resume, a killed rank ending the job, and the batch split checked.

Tolerance: two ranks compute each half-batch gradient separately and average them, one process sums
the whole batch at once, so float32 results differ by rounding (measured: about 1e-7 after 32 steps);
parameters must agree to ``rtol=1e-5, atol=1e-6``.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import minflux as mf
from minflux_train.__main__ import main as train_main
from minflux_train.runs import RunDir

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mpi_launch import command, environment, launch  # noqa: E402

RUN_TINY = Path(__file__).with_name("run_tiny.py")
STEPS = ["--set", "train.max_steps=10", "--quiet"]
TOLERANCE = dict(rtol=1e-5, atol=1e-6)


def two_ranks(*args, env=None):
    done = launch(2, RUN_TINY, *args, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def checkpoint(run, which="latest"):
    c = mf.io.read(RunDir(run).checkpoint(which))
    leaves = dict(mf.tree.named_leaves({"model": c.model, "opt": c.opt_state}, trainable_only=False))
    return leaves, c.meta


def records(run):
    return [json.loads(line) for line in RunDir(run).metrics.read_text().splitlines()]


@pytest.mark.slow
def test_two_ranks_give_the_parameters_of_one_process_and_rerun_bit_identically(cfg, tmp_path, tiny_model):
    assert train_main(["--config", str(cfg), "--out", str(tmp_path / "one"), *STEPS]) == 0
    two_ranks("--config", cfg, "--out", tmp_path / "two", *STEPS)
    again_run = two_ranks("--config", cfg, "--out", tmp_path / "again", *STEPS)
    assert "runs eagerly" not in again_run.stderr    # the averaging is part of the replayed step
    one, meta_one = checkpoint(tmp_path / "one")
    two, meta_two = checkpoint(tmp_path / "two")
    again, _ = checkpoint(tmp_path / "again")
    assert one.keys() == two.keys() and meta_two["step"] == 10
    for name in one:
        np.testing.assert_allclose(two[name], one[name], **TOLERANCE, err_msg=name)
        np.testing.assert_array_equal(again[name], two[name], err_msg=name)
    # the checkpoint holds the recurrent state of all 4 streams, gathered from both ranks
    np.testing.assert_allclose(meta_two["recurrent_state"][0]["h"], meta_one["recurrent_state"][0]["h"],
                               **TOLERANCE)
    # rank 0 alone wrote the metrics: one record per (kind, step), the same as one process's
    r1, r2 = records(tmp_path / "one"), records(tmp_path / "two")
    assert [(r["kind"], r["step"]) for r in r2] == [(r["kind"], r["step"]) for r in r1]
    for a, b in zip(r1, r2):
        for key in ("loss", "bpc", "valid_bpc"):
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5), (a, b)
        assert a.get("chars") == b.get("chars")  # validation covered the same characters
        for key in ("boundary_rates", "flush", "update", "copy"):  # every rank's boundary counts
            assert (key in a) == (key in b), (key, a, b)
            if key in a:
                assert b[key] == pytest.approx(a[key], abs=1e-5), (key, a, b)
    assert (tmp_path / "two" / "train.log").is_file() and (tmp_path / "two" / "sample.txt").is_file()


@pytest.mark.slow
def test_a_two_rank_run_resumes_exactly_on_two_ranks_and_on_one(cfg, tmp_path, tiny_model):
    two_ranks("--config", cfg, "--out", tmp_path / "whole", *STEPS)
    two_ranks("--config", cfg, "--out", tmp_path / "part", "--set", "train.max_steps=7", "--quiet")
    _, meta = checkpoint(tmp_path / "part")
    assert meta["step"] == 7 and meta["recurrent_state"][0]["h"].shape == (4, 16)  # mid-epoch state
    shutil.copytree(tmp_path / "part", tmp_path / "part-one")
    two_ranks("--out", tmp_path / "part", "--resume", *STEPS)
    assert train_main(["--out", str(tmp_path / "part-one"), "--resume", *STEPS]) == 0
    whole, _ = checkpoint(tmp_path / "whole")
    resumed, _ = checkpoint(tmp_path / "part")
    on_one, _ = checkpoint(tmp_path / "part-one")
    for name in whole:
        np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)
        np.testing.assert_allclose(on_one[name], whole[name], **TOLERANCE, err_msg=name)
    kept = lambda run: [(r["kind"], r["step"]) for r in records(run) if r["kind"] in ("valid", "end")]  # noqa: E731
    assert kept(tmp_path / "whole") == [("valid", 5), ("end", 10)]
    # the run that finished at step 7 and was trained further keeps its end validation of step 7
    assert kept(tmp_path / "part") == kept(tmp_path / "part-one") == [("valid", 5), ("end", 7), ("end", 10)]


@pytest.mark.slow
def test_killing_one_rank_ends_the_job_and_the_run_resumes(cfg, tmp_path, tiny_model):
    out = tmp_path / "run"
    job = subprocess.Popen(command(2, RUN_TINY, "--config", cfg, "--out", out, "--set", "train.max_steps=400",
                                   "--quiet"),
                           env=environment({"RUN_TINY_STEP_SECONDS": "0.2", "RUN_TINY_PID_DIR": str(tmp_path)}),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            if RunDir(out).latest.is_file() and (tmp_path / "rank1.pid").is_file():
                break
            time.sleep(0.1)
        assert job.poll() is None, job.communicate()[1][-2000:]
        os.kill(int((tmp_path / "rank1.pid").read_text()), signal.SIGKILL)
        stdout, stderr = job.communicate(timeout=60)  # a hang fails here
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode != 0
    said = stdout + stderr  # MPICH's launcher reports on stdout
    assert "BAD TERMINATION" in said and "signal 9" in said.lower()
    step = checkpoint(out)[1]["step"]
    two_ranks("--out", out, "--resume", "--set", f"train.max_steps={step + 2}", "--quiet")
    assert checkpoint(out)[1]["step"] == step + 2


def test_a_step_that_is_not_finite_on_one_rank_stops_every_rank_at_that_step(cfg, tmp_path):
    done = launch(2, RUN_TINY, "--config", cfg, "--out", tmp_path / "r", *STEPS,
                  env={"RUN_TINY_NAN_RANK": "1"})
    assert done.returncode != 0
    # rank 0's own gradients are finite; it stops because the averaged ones are not, at the same step
    assert ("training stopped: the loss or the gradients averaged over the 2 ranks are not finite (this "
            "rank's own are) at step 4") in done.stderr
    assert "training stopped: the loss is nan at step 4" in done.stderr


def test_a_batch_that_does_not_split_over_the_ranks_is_a_clear_error(cfg, tmp_path):
    done = launch(2, RUN_TINY, "--config", cfg, "--out", tmp_path / "r", "--set", "train.batch_size=3")
    assert done.returncode != 0
    assert "train.batch_size = 3 streams cannot be split evenly over 2 ranks" in done.stderr
    assert not RunDir(tmp_path / "r").metrics.exists()
