"""Learning-rate schedules, warm-up and early stopping from a config: the rates each step trains with,
an exact resume, a compiled step recorded once although the rate changes at every step, and a run
that stops when validation stops improving."""
import json
import math
import re

import pytest

import minflux as mf
from minflux_train.__main__ import main
from minflux_train.config import ConfigError, load_config
from minflux_train.evaluate import Evaluation
from minflux_train.loop import Trainer, start_run, train
from minflux_train.lr_schedule import LearningRate
from minflux_train.runs import RunDir

from test_resume import LONG, assert_identical_runs, finished, killed_and_resumed, plain

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

COSINE = LONG + ["optim.schedule=cosine", "optim.warmup_steps=5", "optim.min_lr=0.0001"]


def rates(path):
    """{step: learning rate} of the train records (the rate of the step that ends there)."""
    lines = RunDir(path).metrics.read_text().splitlines()
    return {r["step"]: r["lr"] for r in map(json.loads, lines) if r["kind"] == "train"}


@pytest.mark.parametrize("keys, expected", [
    (["optim.schedule=cosine", "optim.warmup_steps=5", "optim.min_lr=0.0001"],
     mf.optim.LinearWarmup(0.002, 5, start_factor=1 / 6, after=mf.optim.CosineDecay(0.002, 35, lr_min=1e-4))),
    (["optim.schedule=step", "optim.decay_every=10", "optim.decay_factor=0.1"],
     mf.optim.StepDecay(0.002, 10, gamma=0.1)),
    (["optim.schedule=exponential", "optim.decay_every=10", "optim.decay_factor=0.5", "optim.min_lr=0"],
     mf.optim.ExponentialDecay(0.002, gamma=0.5 ** 0.1)),
    (["optim.schedule=one_cycle", "optim.decay_steps=30", "optim.one_cycle_rise=0.2"],
     mf.optim.OneCycle(0.002, 30, pct_start=0.2)),
    (["optim.schedule=constant", "optim.warmup_steps=4"], mf.optim.LinearWarmup(0.002, 4, start_factor=0.2)),
])
def test_each_schedule_trains_every_step_at_the_rate_its_keys_describe(cfg, tmp_path, tiny_model, keys,
                                                                      expected):
    config = load_config(cfg, LONG + keys)
    run = RunDir(tmp_path / "run")
    with run.locked():
        trainer = start_run(config, run, resume=False)
        trainer.fit()
    for step, lr in rates(run.path).items():
        assert lr == pytest.approx(expected(step - 1), rel=1e-12), step  # the rate of step index step-1
    assert len(set(rates(run.path).values())) >= 3  # it really changed between validations
    assert trainer.step.recordings <= 2 and trainer.step.replays >= 38  # the rate is data, not a key


def test_a_cosine_run_with_warmup_killed_anywhere_resumes_bit_identically(cfg, tmp_path, tiny_model,
                                                                          interrupt):
    config = load_config(cfg, COSINE)
    reference = train(config, RunDir(tmp_path / "whole"))
    resumed = killed_and_resumed(config, interrupt, 4, tmp_path / "split")  # in the warm-up, after step 3's checkpoint
    assert resumed.valid.bpc == reference.valid.bpc and resumed.sample == reference.sample
    assert_identical_runs(config, tmp_path / "whole", tmp_path / "split")
    assert rates(tmp_path / "split") == rates(tmp_path / "whole")


def test_the_schedule_state_goes_through_the_checkpoint_unchanged(cfg, tmp_path, tiny_model):
    config = load_config(cfg, COSINE + ["train.max_steps=12"])
    train(config, RunDir(tmp_path / "run"))
    first = mf.io.read(RunDir(tmp_path / "run").latest).meta
    assert first["schedule"]["kind"] == "cosine" and first["schedule"]["after"]["total"] == 7
    # a longer run later keeps the span it started with: the rates already trained stay true
    again = finished(load_config(cfg, COSINE + ["train.max_steps=30"]), tmp_path / "run")
    again.save("latest")
    second = mf.io.read(RunDir(tmp_path / "run").latest).meta
    assert plain(second["schedule"]) == plain(first["schedule"])


def test_a_new_peak_rate_on_resume_rescales_the_schedule(cfg, tmp_path, tiny_model):
    config = load_config(cfg, COSINE + ["train.max_steps=20"])
    train(config, RunDir(tmp_path / "run"))
    again = Trainer(load_config(cfg, COSINE + ["train.max_steps=20", "optim.lr=0.004"]),
                    RunDir(tmp_path / "run"), resume=True, set_keys=["optim.lr"])
    again.restore()
    started_so = LearningRate(load_config(cfg, COSINE + ["train.max_steps=20", "optim.lr=0.004"]).optim, 20)
    assert [again.schedule.rate(t) for t in range(20)] == [started_so.rate(t) for t in range(20)]
    assert again.schedule.rate(10) > 1.5 * LearningRate(config.optim, 20).rate(10)


def test_a_checkpoint_of_another_schedule_is_refused_naming_both(cfg, tmp_path, tiny_model):
    train(load_config(cfg, ["train.max_steps=6"]), RunDir(tmp_path / "run"))
    trainer = Trainer(load_config(cfg, ["train.max_steps=6", "optim.schedule=cosine"]),
                      RunDir(tmp_path / "run"), resume=True)
    with pytest.raises(ConfigError, match="--resume cannot change optim.schedule"):
        trainer.restore()


def scripted(monkeypatch, bpcs):
    """Make the validations return ``bpcs`` in turn (the end validations included), then ever better
    results from 2.0 down."""
    results = iter(bpcs)
    count = iter(range(1000))

    def validate(self, max_chars=None):
        bpc = next(results, None)
        bpc = 2.0 - 0.01 * next(count) if bpc is None else bpc
        return Evaluation(float(bpc) * math.log(2), 100, 4)

    monkeypatch.setattr(Trainer, "validate", validate)


def test_early_stopping_stops_after_that_many_validations_without_improvement(cfg, tmp_path, tiny_model,
                                                                              monkeypatch, capsys):
    scripted(monkeypatch, [3.0, 2.5, 2.6, 2.55, 2.7, 2.65])  # the best is the 2nd; the 3rd to 5th fail
    out = tmp_path / "run"
    args = ["--config", str(cfg), "--out", str(out), "--set", "train.epochs=3", "--set", "train.max_steps=40", "--set",
            "train.eval_every=4", "--set", "train.early_stopping=3", "--set", "optim.schedule=constant"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    records = [json.loads(line) for line in RunDir(out).metrics.read_text().splitlines()]
    assert [r["step"] for r in records if r["kind"] == "valid"] == [4, 8, 12, 16, 20]
    end = records[-1]
    assert end["kind"] == "end" and end["stopped"] == "early_stopping" and end["step"] == 20
    assert ("stopped early: 3 validations in a row without improvement (train.early_stopping = 3) at step "
            "20") in printed
    assert re.search(r"raise train.early_stopping \(0: off\): .* --resume --set train.early_stopping=6",
                     printed)
    # resumed as it is, it has nothing left to train, and says which key to raise
    assert main(["--out", str(out), "--resume"]) == 0
    printed = capsys.readouterr().out
    assert "nothing to train, the run had already reached its early stop after 3 validations" in printed
    assert [r for r in map(json.loads, RunDir(out).metrics.read_text().splitlines())][-1] == end
    # with more patience it trains on, counting the validations it already failed
    assert main(["--out", str(out), "--resume", "--set", "train.early_stopping=4"]) == 0
    last = json.loads(RunDir(out).metrics.read_text().splitlines()[-1])
    assert last["stopped"] == "max_steps" and last["step"] == 40  # the validations after 20 improved


def test_early_stopping_is_off_at_zero(cfg, tmp_path, tiny_model, monkeypatch):
    scripted(monkeypatch, [3.0] + [4.0] * 20)
    outcome = train(load_config(cfg, ["train.max_steps=30", "train.eval_every=2"]), RunDir(tmp_path / "run"))
    assert outcome.stopped == "max_steps" and outcome.position.step == 30


@pytest.mark.parametrize("keys, message", [
    (["optim.schedule=cosine", "optim.decay_every=10"],
     'optim.decay_every = 10 means nothing for optim.schedule = "cosine": optim.decay_every and '
     'optim.decay_factor apply to optim.schedule = "step" or "exponential" only'),
    (["optim.schedule=step", "optim.plateau_patience=5"],
     'optim.plateau_patience = 5 means nothing for optim.schedule = "step"'),
    (["optim.schedule=one_cycle", "optim.warmup_steps=10"],
     'applies to every optim.schedule but "one_cycle" (one_cycle rises from optim.lr / 25 by itself)'),
    (["optim.schedule=step", "optim.decay_factor=1.5"], "optim.decay_factor = 1.5 must be below 1"),
])
def test_schedule_keys_that_mean_nothing_are_refused(keys, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, keys)
