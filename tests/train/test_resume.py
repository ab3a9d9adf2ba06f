"""Exact resume across epochs, what --resume may change, the NaN guard and one record per step."""
import json
import os
import signal

import numpy as np
import pytest

import minflux as mf
from minflux_train.__main__ import main
from minflux_train.config import load_config
from minflux_train.loop import Trainer, TrainingDiverged, train
from minflux_train.runs import RunDir

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

# 17 windows per epoch (564 characters in 4 streams of 8): 40 steps cross two epoch boundaries
LONG = ["train.epochs=3", "train.max_steps=40", "train.eval_every=7", "train.log_every=2",
        "train.checkpoint_every=3", "train.slope_annealing=true"]


def plain(x):
    """``x`` with arrays as lists and generators as their state, for comparison."""
    if isinstance(x, dict):
        return {k: plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return [str(x.dtype), x.tolist()]
    if isinstance(x, np.random.Generator):
        return x.bit_generator.state
    return x


def parameters(model):
    return {name: np.array(a) for name, a in mf.tree.named_leaves(model, trainable_only=False)}


def finished(config, path):
    trainer = Trainer(config, RunDir(path), resume=True)
    trainer.restore()
    return trainer


def records(path, drop=("seconds", "chars_per_s")):
    out = []
    for line in RunDir(path).metrics.read_text().splitlines():
        r = json.loads(line)
        out.append({k: v for k, v in r.items() if k not in drop})
    return out


def assert_identical_runs(config, a, b):
    ta, tb = finished(config, a), finished(config, b)
    pa, pb = parameters(ta.model), parameters(tb.model)
    assert pa.keys() == pb.keys()
    for name in pa:
        assert np.array_equal(pa[name], pb[name]), name
    assert ta.position == tb.position and ta.model.slope == tb.model.slope
    la = [leaf.state for _, leaf in mf.optim.named_state_leaves(ta.opt_state)]
    lb = [leaf.state for _, leaf in mf.optim.named_state_leaves(tb.opt_state)]
    for sa, sb in zip(la, lb):
        for x, y in zip(mf.tree.named_leaves(sa, trainable_only=False),
                        mf.tree.named_leaves(sb, trainable_only=False)):
            assert np.array_equal(x[1], y[1])
    ra = [r for r in records(a) if r["kind"] != "end"]
    rb = [r for r in records(b) if r["kind"] != "end"]
    assert ra == rb  # the same train / valid / lr lines, each once: means over the same steps


def killed_and_resumed(config, interrupt, step: int, path):
    """A run of ``config`` into ``path`` killed when step ``step`` would run (no cleanup, no checkpoint:
    the steps since the last one are lost), then resumed to its end; the resumed run's outcome."""
    interrupt.kill_at(step)
    with pytest.raises(SystemExit):
        train(config, RunDir(path))
    interrupt.stop()
    return train(config, RunDir(path), resume=True)


@pytest.fixture
def whole(cfg, tmp_path, tiny_model):
    config = load_config(cfg, LONG)
    outcome = train(config, RunDir(tmp_path / "whole"))
    assert outcome.position.epoch == 2 and outcome.position.step == 40
    return config, outcome


@pytest.mark.parametrize("kill_at", [pytest.param(5, marks=pytest.mark.slow), 20,  # each kill: child processes
                                     *(pytest.param(k, marks=pytest.mark.slow) for k in (34, 37))])
def test_hard_kill_anywhere_then_resume_is_bit_identical_across_epochs(whole, tmp_path, interrupt, kill_at):
    config, reference = whole
    resumed = killed_and_resumed(config, interrupt, kill_at, tmp_path / "split")
    assert resumed.valid.bpc == reference.valid.bpc and resumed.sample == reference.sample
    assert_identical_runs(config, tmp_path / "whole", tmp_path / "split")


def test_ctrl_c_mid_epoch_after_the_first_boundary_then_resume_is_bit_identical(whole, tmp_path,
                                                                               monkeypatch):
    config, reference = whole
    real_step = Trainer.train_step
    slopes = []

    def ctrl_c(self, window):
        slopes.append(self.model.slope)
        result = real_step(self, window)
        if self.position.step == 22:
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(Trainer, "train_step", ctrl_c)
    assert train(config, RunDir(tmp_path / "split")).stopped == "interrupted"
    resumed = train(config, RunDir(tmp_path / "split"), resume=True)
    assert slopes[22] == slopes[21] == pytest.approx(1.04)  # epoch 1's slope, also right after resume
    assert resumed.valid.bpc == reference.valid.bpc
    assert_identical_runs(config, tmp_path / "whole", tmp_path / "split")


def test_a_restored_trainer_saves_the_checkpoint_it_was_restored_from(cfg, tmp_path, tiny_model, monkeypatch):
    """Every piece of state a checkpoint holds comes back: save -> restore -> save is the identity."""
    config = load_config(cfg, LONG)
    real_step = Trainer.train_step

    def ctrl_c(self, window):
        result = real_step(self, window)
        if self.position.step == 20:  # stops after step 21, mid-way between two metrics lines
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(Trainer, "train_step", ctrl_c)
    train(config, RunDir(tmp_path / "run"))
    monkeypatch.setattr(Trainer, "train_step", real_step)
    first = mf.io.read(RunDir(tmp_path / "run").latest)
    again = finished(config, tmp_path / "run")
    monkeypatch.setattr(again.meter, "state_dict", lambda: dict(first.meta["meter"]))  # time moves on
    again.save("latest")
    second = mf.io.read(RunDir(tmp_path / "run").latest)
    assert plain(second.meta) == plain(first.meta)
    assert plain(second.model) == plain(first.model) and plain(second.opt_state) == plain(first.opt_state)
    assert first.meta["meter"]["steps"] == 1 and first.meta["slope"] == pytest.approx(1.04)


def test_a_nan_gradient_with_a_finite_loss_stops_before_any_parameter_changes(cfg, tmp_path, tiny_model,
                                                                             monkeypatch, capsys):
    real = mf.withgradient
    poison = {}   # data the step reads, so a compiled step sees it change too

    def poisoned(f, *args):
        value, grads = real(f, *args)
        for name in ("W", "O"):
            poison.setdefault(name, np.ones(getattr(grads[0], name).shape, np.float32))
            setattr(grads[0], name, getattr(grads[0], name) * poison[name])
        return value, grads

    monkeypatch.setattr(mf, "withgradient", poisoned)
    out = tmp_path / "run"
    seen = {}
    real_step = Trainer.train_step

    def remember(self, window):
        seen["before"] = parameters(self.model)
        if self.position.step == 7:
            poison["W"][0, 0], poison["O"][1, 1] = np.nan, np.inf
        return real_step(self, window)

    monkeypatch.setattr(Trainer, "train_step", remember)
    run = RunDir(out)
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.eval_every=100"]) == 1
    message = capsys.readouterr().err
    assert "the gradient of W is not finite (nor are those of 1 more array: O) at step 8" in message
    assert "the parameters were not updated" in message and str(run.latest) in message
    assert [line for line in message.splitlines() if "training stopped" in line] == [message.splitlines()[-1]]
    saved = Trainer(load_config(run.config), run, resume=True)
    saved.restore()
    assert saved.position.step == 6  # checkpoints every 3 steps; step 8 never finished
    for name, array in parameters(saved.model).items():
        assert np.isfinite(array).all(), name


def test_the_step_that_finds_a_nan_gradient_leaves_the_model_as_it_was(cfg, tmp_path, tiny_model,
                                                                       monkeypatch):
    real = mf.withgradient

    def poisoned(f, *args):
        value, grads = real(f, *args)
        grads[0].b[...] = np.nan
        return value, grads

    trainer = Trainer(load_config(cfg), RunDir(tmp_path / "run").create())
    trainer.state = trainer.model.initial_state(4)
    before = parameters(trainer.model)
    adam_before = [np.array(leaf.state[-1][0]) for _, leaf in mf.optim.named_state_leaves(trainer.opt_state)]
    monkeypatch.setattr(mf, "withgradient", poisoned)
    with pytest.raises(TrainingDiverged, match="the gradient of b is not finite at step 1"):
        trainer.train_step(trainer.batcher.window(0))
    after = parameters(trainer.model)
    assert all(np.array_equal(before[k], after[k]) for k in before)
    adam_after = [np.array(leaf.state[-1][0]) for _, leaf in mf.optim.named_state_leaves(trainer.opt_state)]
    assert all(np.array_equal(a, b) for a, b in zip(adam_before, adam_after))


def test_a_failed_resume_leaves_config_toml_as_it_was(cfg, tmp_path, tiny_model, capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=6", "--quiet"]) == 0
    run = RunDir(out)
    text = "# my notes on this run\n" + run.config.read_text()
    run.config.write_text(text)
    capsys.readouterr()
    assert main(["--out", str(out), "--resume", "--set", "model.hidden_sizes=[32, 32]",
                 "--set", "train.seed=4"]) == 1
    err = capsys.readouterr().err
    assert "--resume cannot change model.hidden_sizes (trained with [16], now [32, 32]), train.seed" in err
    assert err.splitlines()[-1].startswith("error: --resume cannot change")
    assert run.config.read_text() == text


def test_resume_applies_a_new_learning_rate_and_clipping_and_keeps_comments(cfg, tmp_path, tiny_model,
                                                                            capsys):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=6", "--quiet"]) == 0
    run = RunDir(out)
    run.config.write_text("# my notes on this run\n" + run.config.read_text())
    assert main(["--out", str(out), "--resume", "--quiet", "--set", "optim.lr=0.0005",
                 "--set", "optim.clip_norm=0", "--set", "train.max_steps=10"]) == 0
    trainer = finished(load_config(run.config), out)
    rules = {repr(leaf.rule) for _, leaf in mf.optim.named_state_leaves(trainer.opt_state)}
    assert rules == {"OptimiserChain(rules=(Adam(lr=0.0005, beta1=0.9, beta2=0.999, eps=1e-08),))"}
    lrs = {r["step"]: r["lr"] for r in records(out) if r["kind"] == "train"}
    assert lrs[6] == 0.002 and lrs[8] == lrs[10] == 0.0005
    text = run.config.read_text()
    assert text.startswith("# my notes on this run\n") and "lr = 0.0005" in text
    assert load_config(run.config).train.max_steps == 10
    # clipping back on, with the learning rate named again although the file already says so
    assert main(["--out", str(out), "--resume", "--quiet", "--set", "optim.clip_norm=0.5",
                 "--set", "train.max_steps=12"]) == 0
    rules = {repr(leaf.rule) for _, leaf in mf.optim.named_state_leaves(finished(load_config(run.config),
                                                                                  out).opt_state)}
    assert rules == {"OptimiserChain(rules=(ClipNorm(max_norm=0.5, throw=True), Adam(lr=0.0005, beta1=0.9, "
                     "beta2=0.999, eps=1e-08)))"}


def test_an_explicit_learning_rate_overrides_a_decayed_one(cfg, tmp_path, tiny_model, validation_stops_improving):
    config = load_config(cfg, ["optim.lr=5.0", "optim.plateau_factor=10", "optim.plateau_patience=0",
                               "train.max_steps=25"])
    train(config, RunDir(tmp_path / "run"))
    decayed = finished(config, tmp_path / "run")
    assert decayed.schedule.lr < 5.0
    again = Trainer(config, RunDir(tmp_path / "run"), resume=True, set_keys=["optim.lr"])
    again.restore()
    assert again.schedule.lr == 5.0
    assert {leaf.rule.rules[-1].lr for _, leaf in mf.optim.named_state_leaves(again.opt_state)} == {5.0}


def test_a_fresh_start_after_an_early_kill_keeps_one_record_per_step(cfg, tmp_path, tiny_model, interrupt):
    interrupt.kill_at(2)  # steps 1-2 logged, no checkpoint yet (every 3)
    config = load_config(cfg, ["train.max_steps=8"])
    with pytest.raises(SystemExit):
        train(config, RunDir(tmp_path / "run"))
    interrupt.stop()
    train(config, RunDir(tmp_path / "run"))
    keys = [(r["kind"], r["step"]) for r in records(tmp_path / "run")]
    assert len(keys) == len(set(keys)) and ("train", 2) in keys


def test_interrupted_twice_at_the_same_step_keeps_one_end_record(cfg, tmp_path, tiny_model, interrupt):
    config = load_config(cfg, ["train.max_steps=9"])
    interrupt.ctrl_c()
    train(config, RunDir(tmp_path / "run"))
    train(config, RunDir(tmp_path / "run"), resume=True)
    interrupt.stop()
    train(config, RunDir(tmp_path / "run"), resume=True)
    keys = [(r["kind"], r["step"]) for r in records(tmp_path / "run")]
    assert len(keys) == len(set(keys)) and keys[-1] == ("end", 9)


def test_temporary_files_of_interrupted_saves_are_removed_on_the_next_start(cfg, tmp_path, tiny_model):
    config = load_config(cfg, ["train.max_steps=6"])
    run = RunDir(tmp_path / "run")
    train(config, run)
    leftovers = [run.checkpoints / "latest.h5.tmpk2x9q1", run.checkpoints / ".latest.h5.4242-1.tmp",
                 run.path / ".metrics.jsonl.4242-1.tmp"]
    for path in leftovers:
        path.write_bytes(b"half a file")
    train(load_config(cfg, ["train.max_steps=9"]), run, resume=True)
    assert not any(p.exists() for p in leftovers)
    assert sorted(p.name for p in run.checkpoints.iterdir()) == ["best.h5", "latest.h5"]


@pytest.mark.parametrize("umask", [0o002, 0o077])
def test_checkpoints_are_0600_and_every_other_run_file_0644(cfg, tmp_path, tiny_model, umask):
    old = os.umask(umask)
    try:
        assert main(["--config", str(cfg), "--out", str(tmp_path / "run"), "--set", "train.max_steps=6",
                     "--quiet"]) == 0
    finally:
        os.umask(old)
    run = RunDir(tmp_path / "run")
    modes = {p.name: p.stat().st_mode & 0o777 for p in [run.config, run.metrics, run.log, run.sample,
                                                          run.latest, run.best]}
    assert modes == {"config.toml": 0o644, "metrics.jsonl": 0o644, "train.log": 0o644, "sample.txt": 0o644,
                     "latest.h5": 0o600, "best.h5": 0o600}
