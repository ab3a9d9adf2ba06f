"""What the one-line errors advise: a --config that names a folder, a config that is not there, the
fix for a diverged run (only what would change something); train.compile may change on resume."""
import numpy as np
import pytest

from minflux_train.__main__ import main
from minflux_train.config import ConfigError, load_config
from minflux_train.loop import Trainer, train
from minflux_train.runs import RunDir
from minflux_train.step import training_step

from test_resume import finished, parameters

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


def test_config_naming_a_folder_says_so_once(tmp_path, capsys):
    (tmp_path / "mine.toml").write_text("")
    assert main(["--config", str(tmp_path)]) == 1
    line = one_error(capsys)
    assert line == (f"error: config {tmp_path} is a folder, not a config file: name a .toml file (it holds "
                    "mine.toml)")


def test_config_naming_a_run_directory_says_how_to_continue_it(cfg, tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=3", "--quiet"]) == 0
    capsys.readouterr()
    assert main(["--config", str(out)]) == 1
    line = one_error(capsys)
    assert f"--out {out} --resume" in line and f"--config {out / 'config.toml'}" in line
    assert "not found" not in line


def test_a_missing_config_names_it_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config("nope.toml")
    message = str(caught.value)
    assert message.count("nope.toml") == 1 and str(tmp_path) not in message
    assert "shipped configs: default.toml" in message


@pytest.mark.parametrize("keys, advice, not_advised", [
    ([], "Try a smaller learning rate, e.g. --set optim.lr=0.0002 (gradient clipping is already on: "
         "optim.clip_norm = 1.0).", "--set optim.clip_norm"),
    (["optim.clip_norm=0"], "Try a smaller learning rate, e.g. --set optim.lr=0.0002, or gradient clipping: "
                            "--set optim.clip_norm=1.0.", None),
    (["optim.lr=0.01", "optim.schedule=constant", "optim.warmup_steps=9"],
     "e.g. --set optim.lr=0.0005 (gradient clipping", "--set optim.clip_norm"),  # a tenth of step 5's rate
])
def test_a_diverged_run_advises_what_would_change_something(cfg, tmp_path, nan_loss_at, capsys, keys, advice,
                                                            not_advised):
    nan_loss_at(5)
    args = ["--config", str(cfg), "--out", str(tmp_path / "run"), "--quiet"]
    assert main(args + [a for k in keys for a in ("--set", k)]) == 1
    line = one_error(capsys)
    assert "the loss is nan at step 5" in line and advice in line
    assert not_advised is None or not_advised not in line


def test_train_compile_may_change_on_resume_and_the_numbers_do_not(cfg, tmp_path, tiny_model):
    config = load_config(cfg, ["train.max_steps=12"])
    train(config, RunDir(tmp_path / "whole"))
    split = tmp_path / "split"
    assert main(["--config", str(cfg), "--out", str(split), "--set", "train.max_steps=6", "--quiet"]) == 0
    assert main(["--out", str(split), "--resume", "--set", "train.max_steps=12", "--set",
                 "train.compile=false", "--quiet"]) == 0
    eager = load_config(RunDir(split).config)
    assert eager.train.compile is False and Trainer(eager, RunDir(split)).step is training_step
    a, b = parameters(finished(config, tmp_path / "whole").model), parameters(finished(eager, split).model)
    assert all(np.array_equal(a[k], b[k]) for k in a)  # compiled to step 6, eager after it: the same
