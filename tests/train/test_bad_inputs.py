"""Bad inputs to ``python -m train`` are one line naming the key and the fix, exit status 1, before any
training, and leave nothing behind."""
import os
import warnings

import pytest

from minflux_train.__main__ import main
from minflux_train.runs import RunDir

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def refused(capsys, argv, expected):
    status = main(argv)
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]
    assert status == 1 and "Traceback" not in captured.err, captured.err
    assert len(errors) == 1 and expected in errors[0], captured.err
    assert "Warning" not in captured.err, captured.err
    return errors[0]


def test_a_one_layer_hmlstm_names_the_key_and_both_fixes(cfg, tmp_path, capsys):
    out = tmp_path / "run"
    line = refused(capsys, ["--config", str(cfg), "--out", str(out), "--set", "model.hidden_sizes=[16]"],
                   "model.hidden_sizes = [16]: an HM-LSTM needs at least 2 layers")
    assert "--set model.hidden_sizes=[16,16]" in line and "--set model.kind=lstm" in line
    assert not out.exists()


@pytest.mark.parametrize("text, expected", [
    ("", "holds no text (0 tokens); point data.path at a non-empty file or folder"),
    ("abc", "the valid split has 0 tokens, and it needs at least 2; the whole corpus ("),
    ("the cat sat on a mat",
     "the valid split has 1 token, and it needs at least 2; it is cut from 20 tokens"),
])
def test_an_empty_or_tiny_corpus(cfg, tmp_path, tiny_model, capsys, text, expected):
    (tmp_path / "corpus.txt").write_text(text)
    out = tmp_path / "run"
    refused(capsys, ["--config", str(cfg), "--out", str(out)], expected)
    assert not out.exists()


def test_a_tiny_corpus_says_how_long_a_run_needs_it_to_be(cfg, tmp_path, tiny_model, capsys):
    (tmp_path / "corpus.txt").write_text("abc")
    line = refused(capsys, ["--config", str(cfg), "--out", str(tmp_path / "run")], "has only 3 tokens")
    assert "a run needs at least 7 (train.batch_size + 1 to train on, 2 to validate)" in line


def test_a_split_without_validation_text(cfg, tmp_path, tiny_model, capsys):
    line = refused(capsys, ["--config", str(cfg), "--out", str(tmp_path / "run"), "--set",
                            "data.split=[1.0, 0.0, 0.0]"], "the valid split has 0 tokens")
    assert "data.split = [1.0, 0.0, 0.0]: give the valid split a larger fraction" in line


def test_a_batch_the_training_split_cannot_fill(cfg, tmp_path, tiny_model, capsys):
    refused(capsys, ["--config", str(cfg), "--out", str(tmp_path / "run"), "--set", "train.batch_size=5000"],
            "train.batch_size = 5000: the training split's 496 tokens cannot fill 5000 streams (one token "
            "each, plus one); use --set train.batch_size=495 or less")


def test_a_prime_outside_the_vocabulary_is_refused_before_training(cfg, tmp_path, tiny_model, capsys,
                                                                  monkeypatch):
    from minflux_train.loop import Trainer

    monkeypatch.setattr(Trainer, "train_step", lambda *a: pytest.fail("trained before checking the prime"))
    out = tmp_path / "run"
    refused(capsys, ["--config", str(cfg), "--out", str(out), "--set", 'sample.prime="Zebra"'],
            "sample.prime = 'Zebra': 'Z' is not in the vocabulary")
    assert not out.exists()


def test_a_learning_rate_the_dtype_cannot_hold_is_refused_without_warnings(cfg, tmp_path, tiny_model, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy overflow warning would fail here
        refused(capsys, ["--config", str(cfg), "--out", str(tmp_path / "run"), "--set", "optim.lr=1e300"],
                "--set optim.lr=1e300: optim.lr = 1e+300 is more than model.dtype = float32 can hold")
    assert main(["--config", str(cfg), "--out", str(tmp_path / "run64"), "--set", "optim.lr=1e300",
                 "--set", "model.dtype=float64", "--set", "train.max_steps=1", "--quiet"]) in (0, 1)
    assert "can hold" not in capsys.readouterr().err  # float64 holds it; the order of --set does not matter


@pytest.mark.parametrize("make, what", [(os.mkdir, "a folder"), (os.mkfifo, "a FIFO (named pipe)")])
def test_a_latest_checkpoint_that_is_not_a_file_is_named_before_training(cfg, tmp_path, tiny_model, capsys,
                                                                        make, what):
    fresh = RunDir(tmp_path / "fresh")
    fresh.checkpoints.mkdir(parents=True)
    make(fresh.latest)
    expected = f"error: {fresh.latest} is {what}, not a checkpoint file; move it out of {fresh.checkpoints}"
    assert refused(capsys, ["--config", str(cfg), "--out", str(fresh)], expected).startswith(expected)
    assert not fresh.metrics.exists()
    trained = RunDir(tmp_path / "trained")
    assert main(["--config", str(cfg), "--out", str(trained), "--set", "train.max_steps=3", "--quiet"]) == 0
    trained.latest.unlink()
    make(trained.latest)
    before = trained.metrics.read_bytes()
    expected = f"error: {trained.latest} is {what}, not a checkpoint file"
    assert refused(capsys, ["--out", str(trained), "--resume"], expected).startswith(expected)
    assert trained.metrics.read_bytes() == before
