"""How long a run trains, why it stopped, and what it says: step limits that do not depend on the
machine's speed, a time budget as an option, the summary on stdout and in train.log, plain progress
lines without a terminal."""
import re

import numpy as np
import pytest

import minflux as mf
import minflux_train.loop as loop_module
import minflux_train.meter as meter_module
from minflux_train.__main__ import main
from minflux_train.cli import command_for
from minflux_train.config import load_config
from minflux_train.data import StreamBatcher
from minflux_train.loop import Trainer, train
from minflux_train.runs import RunDir, corpus_for
from minflux_train.stopping import Budget

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


class SlowClock:
    """Stands in for the time module in train.loop and train.meter: every reading is ``tick`` seconds after the last,
    as on a machine so loaded that each step takes minutes."""

    def __init__(self, tick):
        self.now, self.tick = 0.0, tick

    def perf_counter(self):
        self.now += self.tick
        return self.now


def parameters(model):
    return {name: np.array(a) for name, a in mf.tree.named_leaves(model, trainable_only=False)}


def test_the_default_experiment_stops_at_a_step_limit_not_a_time_budget():
    cfg = load_config("default")
    assert cfg.train.max_minutes == 0 and cfg.train.max_steps > 0
    windows = len(StreamBatcher(corpus_for(cfg).split("train"), cfg.train.batch_size, cfg.train.seq_len,
                                drop_tail=True))
    budget = Budget.of(epochs=cfg.train.epochs, max_steps=cfg.train.max_steps, max_minutes=0.0,
                       windows_per_epoch=windows)
    assert budget.key == "train.max_steps" and budget.steps == cfg.train.max_steps < cfg.train.epochs * windows


def test_a_step_limit_takes_the_same_steps_and_result_on_a_slow_machine(cfg, tmp_path, tiny_model, monkeypatch):
    config = load_config(cfg, ["train.max_steps=12"])
    fast = train(config, RunDir(tmp_path / "fast"))
    clock = SlowClock(tick=30.0)
    monkeypatch.setattr(loop_module, "time", clock)
    monkeypatch.setattr(meter_module, "time", clock)
    slow = train(config, RunDir(tmp_path / "slow"))
    assert fast.stopped == slow.stopped == "max_steps"
    assert fast.position == slow.position and fast.position.step == 12
    assert slow.elapsed > 12 * 30  # "minutes" per step, and still every step ran
    assert fast.valid.bpc == slow.valid.bpc
    a = Trainer(config, RunDir(tmp_path / "fast"), resume=True)
    b = Trainer(config, RunDir(tmp_path / "slow"), resume=True)
    a.restore(), b.restore()
    pa, pb = parameters(a.model), parameters(b.model)
    assert all(np.array_equal(pa[k], pb[k]) for k in pa)


def test_a_time_budget_stops_early_and_a_resumed_run_past_it_says_which_key_to_raise(
        cfg, tmp_path, tiny_model, monkeypatch, capsys):
    clock = SlowClock(tick=1.0)
    monkeypatch.setattr(loop_module, "time", clock)
    monkeypatch.setattr(meter_module, "time", clock)
    out = tmp_path / "run"
    args = ["--config", str(cfg), "--out", str(out), "--set", "train.max_minutes=0.5", "--set",
            "train.max_steps=25", "--set", "train.eval_every=100"]
    assert main(args) == 0
    printed, logged = capsys.readouterr()
    step = int(re.search(r"used up the time budget train.max_minutes = 0.5 at step (\d+),", printed)[1])
    assert 0 < step < 25 and "the step limit was 25" in printed
    assert f"{command_for('train')} --out {out} --resume --set train.max_minutes=1" in printed
    totals = [(int(s), int(t.replace(",", ""))) for s, t in re.findall(r"^step (\d+)/([\d,]+) ", logged, re.M)]
    assert totals and all(s <= t <= 25 for s, t in totals) and totals[-1][1] < 25  # what the budget allows

    assert main(["--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert ("stopped: nothing to train, the run had already reached its time budget "
            f"train.max_minutes = 0.5 (step {step}, epoch") in printed
    assert "raise train.max_minutes" in printed


def test_the_summary_says_why_it_stopped_goes_to_train_log_and_progress_lines_go_to_the_log(
        cfg, tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=6"]) == 0
    printed, logged = capsys.readouterr()
    assert "stopped: reached the step limit train.max_steps = 6 (step 6, epoch 0," in printed
    assert f"to train further, raise train.max_steps: {command_for('train')} --out {out} --resume " \
           "--set train.max_steps=12" in printed
    # pytest's stderr is not a terminal: no bar, a plain line every log_every (2) steps instead
    lines = re.findall(r"^step (\d+)/6 \(\d+%\) epoch 0 \| loss [\d.]+ bpc [\d.]+ \| .* left$", logged, re.M)
    assert lines == ["2", "4", "6"]
    log_text = RunDir(out).log.read_text()
    for text in ["training to step 6 (train.max_steps", "step 4/6 (67%)", "validation: ",
                 "stopped: reached the step limit", "sample (temperature 1.0):", "run files: "]:
        assert text in log_text, text

    assert main(["--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "stopped: nothing to train, the run had already reached train.max_steps = 6 (step 6" in printed
    assert "--resume --set train.max_steps=12" in printed
    assert main(["--out", str(out), "--resume", "--set", "train.max_steps=12"]) == 0
    assert "reached the step limit train.max_steps = 12 (step 12," in capsys.readouterr().out


def test_a_run_that_finishes_its_epochs_says_so(cfg, tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.epochs=1", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert re.search(r"stopped: finished train.epochs = 1 at step \d+, epoch 1 ", printed)
    assert "raise train.epochs: " in printed and "--set train.epochs=2" in printed


def test_an_interrupted_run_says_how_to_continue(cfg, tmp_path, tiny_model, monkeypatch, capsys):
    real_step = Trainer.train_step

    def step_then_sigterm(self, window):
        result = real_step(self, window)
        if self.position.step == 3:
            self.stop.reason = "SIGTERM"
        return result

    monkeypatch.setattr(Trainer, "train_step", step_then_sigterm)
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--quiet"]) == 130
    printed = capsys.readouterr().out
    assert "stopped: the run was interrupted at step 4, epoch 0" in printed
    assert f"continue with: {command_for('train')} --out {out} --resume" in printed
    assert "stopped: the run was interrupted" in RunDir(out).log.read_text()


@pytest.mark.parametrize("max_steps, key, steps", [(0, "train.epochs", 30), (40, "train.epochs", 30),
                                                   (12, "train.max_steps", 12)])
def test_the_budget_takes_the_smaller_limit(max_steps, key, steps):
    b = Budget.of(epochs=3, max_steps=max_steps, max_minutes=0.0, windows_per_epoch=10)
    assert (b.key, b.steps, b.seconds) == (key, steps, float("inf"))
    assert b.projected_steps(5, 100.0, 5, 100.0) == steps  # no time budget: the limit, however slow


def test_the_projection_follows_the_time_budget():
    b = Budget.of(epochs=100, max_steps=0, max_minutes=2.0, windows_per_epoch=10)  # 120 s, 1000 steps
    assert b.projected_steps(step=0, elapsed=0.0, session_steps=0, session_seconds=0.0) == 1000
    assert b.projected_steps(step=10, elapsed=30.0, session_steps=10, session_seconds=30.0) == 40
    assert b.projected_steps(step=50, elapsed=60.0, session_steps=20, session_seconds=20.0) == 110  # resumed
    assert b.projected_steps(step=30, elapsed=200.0, session_steps=30, session_seconds=200.0) == 30
    assert b.projected_steps(step=10, elapsed=0.1, session_steps=10, session_seconds=0.1) == 1000


def test_the_time_left_counts_the_final_validation_and_the_sample(cfg, tmp_path, tiny_model, monkeypatch,
                                                                  capsys):
    clock = SlowClock(tick=1.0)
    monkeypatch.setattr(loop_module, "time", clock)
    monkeypatch.setattr(meter_module, "time", clock)
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=6"]) == 0
    logged = capsys.readouterr().err
    last = re.findall(r"^step 6/6 .* elapsed, ~(\d\d):(\d\d) left$", logged, re.M)
    assert last and last[-1] != ("00", "00")  # the end of the run is still to come at the last step


def test_a_finished_run_resumed_with_nothing_to_train_does_not_validate_or_sample_again(
        cfg, tmp_path, tiny_model, monkeypatch, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=6", "--quiet"]) == 0
    first = capsys.readouterr().out
    run = RunDir(out)
    records, sample = run.metrics.read_text(), run.sample.read_text()
    monkeypatch.setattr(Trainer, "validate", lambda *a, **k: pytest.fail("validated again"))
    monkeypatch.setattr(loop_module, "generate", lambda *a, **k: pytest.fail("sampled again"))
    assert main(["--out", str(out), "--resume"]) == 0
    again = capsys.readouterr().out
    assert "stopped: nothing to train, the run had already reached train.max_steps = 6" in again
    valid = re.search(r"^validation: (.*) \[step 6, ", first, re.M)[1]
    assert f"validation: {valid} [step 6, recorded when the run finished" in again
    assert sample.rstrip("\n") in again
    assert run.metrics.read_text() == records and run.sample.read_text() == sample


def test_the_final_validation_reads_final_eval_chars(cfg, tmp_path, tiny_model):
    quick = train(load_config(cfg, ["train.max_steps=3", "train.final_eval_chars=20"]), RunDir(tmp_path / "q"))
    whole = train(load_config(cfg, ["train.max_steps=3"]), RunDir(tmp_path / "w"))
    assert quick.valid.chars == 20
    assert whole.valid.chars == len(corpus_for(load_config(cfg)).split("valid")) - 1 > 20
