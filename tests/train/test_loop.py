"""The training loop on a tiny stand-in model: outputs, exact resume, NaN handling."""
import json
import os
import signal

import numpy as np
import pytest

import minflux as mf
from minflux_train.__main__ import main
from minflux_train.config import load_config
from minflux_train.loop import Trainer, train
from minflux_train.runs import RunDir

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

def parameters(model):
    return {name: np.array(a) for name, a in mf.tree.named_leaves(model, trainable_only=False)}


def assert_same_parameters(a, b):
    pa, pb = parameters(a), parameters(b)
    assert pa.keys() == pb.keys()
    for name in pa:
        assert np.array_equal(pa[name], pb[name]), name


def test_a_run_writes_config_metrics_checkpoints_and_sample(cfg, tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "validation:" in printed and "bits per character" in printed and str(out) in printed
    run = RunDir(out)
    assert load_config(run.config) == load_config(cfg)
    records = [json.loads(line) for line in run.metrics.read_text().splitlines()]
    kinds = {r["kind"] for r in records}
    assert kinds >= {"train", "valid", "end"}
    train_records = [r for r in records if r["kind"] == "train"]
    assert all(len(r["boundary_rates"]) == 1 and r["chars_per_s"] > 0 for r in train_records)
    valid_steps = [r["step"] for r in records if r["kind"] == "valid"]
    assert valid_steps == list(range(5, train_records[-1]["step"] + 1, 5))
    assert run.best.is_file() and run.latest.is_file() and run.sample.read_text().startswith("the ")
    assert records[-1]["kind"] == "end" and records[-1]["stopped"] == "epochs"
    losses = [r["loss"] for r in train_records]
    assert np.mean(losses[-3:]) < np.mean(losses[:3])  # it learns something


def uninterrupted(cfg, tmp_path, steps):
    config = load_config(cfg, [f"train.max_steps={steps}"])
    return train(config, RunDir(tmp_path / "whole"))


def test_interrupt_then_resume_equals_an_uninterrupted_run(cfg, tmp_path, tiny_model, monkeypatch):
    whole = uninterrupted(cfg, tmp_path, 30)
    reference = Trainer(load_config(cfg), RunDir(tmp_path / "whole"), resume=True)
    reference.restore()

    real_step = Trainer.train_step

    def step_then_ctrl_c(self, window):
        result = real_step(self, window)
        if self.position.step == 10:  # the 11th step is running: Ctrl-C arrives now
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(Trainer, "train_step", step_then_ctrl_c)
    config = load_config(cfg, ["train.max_steps=30"])
    first = train(config, RunDir(tmp_path / "split"))
    assert first.stopped == "interrupted" and first.position.step == 11
    monkeypatch.setattr(Trainer, "train_step", real_step)
    resumed = train(config, RunDir(tmp_path / "split"), resume=True)
    assert resumed.stopped == "max_steps" and resumed.position.step == 30
    finished = Trainer(config, RunDir(tmp_path / "split"), resume=True)
    finished.restore()
    assert_same_parameters(finished.model, reference.model)
    assert finished.position == reference.position
    assert resumed.valid.bpc == whole.valid.bpc and resumed.sample == whole.sample


def test_hard_kill_then_resume_recomputes_the_lost_steps_identically(cfg, tmp_path, tiny_model, monkeypatch):
    uninterrupted(cfg, tmp_path, 30)
    reference = Trainer(load_config(cfg), RunDir(tmp_path / "whole"), resume=True)
    reference.restore()
    real_step = Trainer.train_step

    def dies_at_step_17(self, window):
        if self.position.step == 16:
            raise SystemExit("killed")  # no cleanup, no checkpoint: the last one is from step 15
        return real_step(self, window)

    monkeypatch.setattr(Trainer, "train_step", dies_at_step_17)
    config = load_config(cfg, ["train.max_steps=30"])
    with pytest.raises(SystemExit):
        train(config, RunDir(tmp_path / "split"))
    monkeypatch.setattr(Trainer, "train_step", real_step)
    train(config, RunDir(tmp_path / "split"), resume=True)
    finished = Trainer(config, RunDir(tmp_path / "split"), resume=True)
    finished.restore()
    assert_same_parameters(finished.model, reference.model)
    steps = [json.loads(l)["step"] for l in RunDir(tmp_path / "split").metrics.read_text().splitlines()
             if json.loads(l)["kind"] == "train"]
    assert steps == sorted(set(steps))  # steps 16.. were logged once, not twice


def test_nan_loss_stops_with_a_clear_message_and_keeps_the_last_good_checkpoint(cfg, tmp_path, nan_loss_at,
                                                                              monkeypatch, capsys):
    nan_loss_at(8)
    out = tmp_path / "run"
    seen = {}
    real_save = Trainer.save

    def remember(self, which="latest"):
        real_save(self, which)
        seen[which] = parameters(self.model)

    monkeypatch.setattr(Trainer, "save", remember)
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.eval_every=100"]) == 1
    message = capsys.readouterr().err
    assert "the loss is nan at step 8" in message and str(RunDir(out).latest) in message
    assert "--resume" in message and "optim.lr" in message
    assert "error: training stopped: the loss is nan at step 8" in RunDir(out).log.read_text()
    saved = Trainer(load_config(RunDir(out).config), RunDir(out), resume=True)
    saved.restore()
    assert saved.position.step == 6  # checkpoints every 3 steps; step 8 never finished
    for name, array in parameters(saved.model).items():
        assert np.array_equal(array, seen["latest"][name]) and np.isfinite(array).all()


def test_fresh_run_refuses_to_overwrite_an_existing_run(cfg, tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=3"]) == 0
    assert main(["--config", str(cfg), "--out", str(out)]) == 1
    assert "already holds a run" in capsys.readouterr().err


def test_plateau_divides_the_learning_rate(cfg, tmp_path, tiny_model, validation_stops_improving):
    config = load_config(cfg, ["optim.lr=5.0", "optim.plateau_factor=10", "optim.plateau_patience=0",
                               "train.max_steps=25"])
    train(config, RunDir(tmp_path / "run"))
    records = [json.loads(l) for l in RunDir(tmp_path / "run").metrics.read_text().splitlines()]
    decays = [r for r in records if r["kind"] == "lr"]
    assert decays and decays[0]["previous"] == 5.0 and decays[0]["lr"] == pytest.approx(0.5)


def test_the_last_step_is_validated_once_and_does_not_touch_the_schedule(cfg, tmp_path, tiny_model):
    config = load_config(cfg, ["train.max_steps=10", "optim.plateau_patience=0", "optim.lr=5.0"])
    outcome = train(config, RunDir(tmp_path / "run"))
    records = [json.loads(l) for l in RunDir(tmp_path / "run").metrics.read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "valid"] == [5]        # not 10: that is the end's
    end = records[-1]
    assert end["kind"] == "end" and end["step"] == 10 and end["valid_bpc"] == outcome.valid.bpc
    assert not [r for r in records if r["kind"] == "lr" and r["step"] == 10]  # no decay after training
    (at_5,) = [r for r in records if r["kind"] == "valid"]
    best_step = 10 if end["valid_bpc"] < at_5["bpc"] else 5
    assert mf.io.read(RunDir(tmp_path / "run").best).meta["step"] == best_step
    assert end["best_bpc"] == min(end["valid_bpc"], at_5["bpc"])


def test_validation_records_carry_each_layers_boundary_statistics(cfg, tmp_path, tiny_model):
    train(load_config(cfg, ["train.max_steps=12"]), RunDir(tmp_path / "run"))
    records = [json.loads(l) for l in RunDir(tmp_path / "run").metrics.read_text().splitlines()]
    for r in [r for r in records if r["kind"] in ("valid", "end")]:
        (rate,) = r["boundary_rates"]                       # TinyLM: one detector, two "layers"
        assert 0 <= rate <= 1 and len(r["flush"]) == len(r["update"]) == len(r["copy"]) == 2
        for f, u, c in zip(r["flush"], r["update"], r["copy"]):
            assert f + u + c == pytest.approx(1)
        assert r["flush"][1] == 0 and r["update"][1] == pytest.approx(rate)  # the top layer never flushes
        # layer 1 flushes on the step after it fired: the counts differ only at each stream's two ends
        chars = r.get("chars", r.get("valid_chars"))
        assert r["flush"][0] == pytest.approx(rate, abs=r["streams"] / chars)


def test_a_dead_boundary_detector_is_reported_once_in_the_log_and_on_the_console(cfg, tmp_path, tiny_model,
                                                                                monkeypatch, capsys):
    real_call = tiny_model.__call__

    def never_fires(self, tokens, state):
        logits, state, z = real_call(self, tokens, state)
        return logits, state, np.zeros_like(z)

    monkeypatch.setattr(tiny_model, "__call__", never_fires)
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=20"]) == 0
    headline = "layer 1's boundary detector has stopped firing"
    console = capsys.readouterr().err
    logged = RunDir(out).log.read_text()
    assert console.count(headline) == 1 and logged.count(headline) == 1
    assert "at steps 5 and 10" in logged and 'model.init = "authors"' in logged and "optim.lr" in logged


def test_a_detector_that_fires_sometimes_is_not_reported(cfg, tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=20"]) == 0
    assert "boundary detector" not in capsys.readouterr().err + RunDir(out).log.read_text()


@pytest.mark.parametrize("clip_norm, checked", [(1.0, 0), (0.0, 4)])
def test_finite_gradients_are_checked_by_the_clipping_norm_alone(cfg, tmp_path, tiny_model, monkeypatch,
                                                                clip_norm, checked):
    """With clipping, the norm ClipNorm reads answers whether every gradient is finite: the step's own
    check reads only the loss (no second pass over the gradients); without it, all four gradients."""
    from minflux_train import step

    seen = []
    real = step._raise_unless_finite.__wrapped_operation__

    @mf.operation
    def counted(loss, grads):
        seen.append(len(grads))
        return real(loss, grads)

    monkeypatch.setattr(step, "_raise_unless_finite", counted)
    config = load_config(cfg, ["train.max_steps=4", f"optim.clip_norm={clip_norm}"])
    outcome = train(config, RunDir(tmp_path / "run"))
    assert outcome.position.step == 4 and seen and set(seen) == {checked}


def test_an_overflowing_norm_of_finite_gradients_is_named_as_such(monkeypatch):
    from minflux_train import step
    from minflux_train.divergence import OVERFLOWED

    model = {"w": np.zeros(2, np.float32)}
    opt_state = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0, throw=True), mf.optim.Adam(0.1)), model)
    grads = {"w": np.array([3e38, 3e38], np.float32)}     # finite, but their squares overflow
    monkeypatch.setattr(step, "loss_and_gradients", lambda *args: ((np.float32(1.0), None, None), grads))
    with pytest.raises(FloatingPointError):
        step.training_step(model, opt_state, None, None, None, None)
    assert not model["w"].any()                             # nothing was updated
    assert step.why_not_finite(model, None, None, None, None) == OVERFLOWED