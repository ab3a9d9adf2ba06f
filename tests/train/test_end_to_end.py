"""The real models end to end: train a tiny HM-LSTM over three short epochs with slope annealing,
interrupt it mid-epoch and resume it bit-identically, then evaluate, sample and draw its boundaries;
the LSTM baseline trains through the same loop. The runs are a few steps of a few characters, with the
elementwise kernels on the numpy backend (tests/compiled trains every model with numba's kernels)."""
import json
import os
import signal

import numpy as np
import pytest

import minflux as mf
from minflux_train.boundaries import main as boundaries_main
from minflux_train.config import load_config
from minflux_train.evaluate import main as evaluate_main
from minflux_train.loop import Trainer, TrainingDiverged, train
from minflux_train.runs import RunDir
from minflux_train.sample import main as sample_main

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

TINY = ["model.embed_size=8", "model.hidden_sizes=[12, 12]", "model.output_embed_size=16",
        "train.batch_size=3", "train.seq_len=10", "train.max_steps=12", "train.checkpoint_every=4",
        "train.eval_every=6", "train.eval_chars=200", "sample.length=15"]
SHORT_TEXT = "the cat sat on the mat. a dog ran in the fog. " * 5  # 7 windows of 3x10 per epoch


@pytest.fixture
def short_corpus(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text(SHORT_TEXT)
    return [f"data.path={path}", "train.epochs=3", "train.max_steps=15", "train.slope_annealing=true",
            "train.eval_every=5", "train.checkpoint_every=2"]


def final_parameters(config, path):
    trainer = Trainer(config, RunDir(path), resume=True)
    trainer.restore()
    return trainer, {n: np.array(a) for n, a in mf.tree.named_leaves(trainer.model, trainable_only=False)}


@pytest.mark.slow
def test_hmlstm_interrupted_and_resumed_equals_uninterrupted_then_tools_work(cfg, tmp_path, monkeypatch,
                                                                             capsys, short_corpus):
    config = load_config(cfg, TINY + short_corpus + ["model.kind=hmlstm"])
    whole = train(config, RunDir(tmp_path / "whole"))
    assert whole.stopped == "max_steps" and np.isfinite(whole.valid.bpc)
    assert whole.position.epoch == 2 and whole.position.step == 15  # two epoch boundaries crossed

    real_step = Trainer.train_step

    def ctrl_c_at_step_10(self, window):  # epoch 1, window 3: mid-epoch after the first boundary
        result = real_step(self, window)
        if self.position.step == 9:
            os.kill(os.getpid(), signal.SIGINT)
        return result

    monkeypatch.setattr(Trainer, "train_step", ctrl_c_at_step_10)
    assert train(config, RunDir(tmp_path / "split")).stopped == "interrupted"
    monkeypatch.setattr(Trainer, "train_step", real_step)
    resumed = train(config, RunDir(tmp_path / "split"), resume=True)

    a, pa = final_parameters(config, tmp_path / "whole")
    b, pb = final_parameters(config, tmp_path / "split")
    assert pa.keys() == pb.keys() and all(np.array_equal(pa[k], pb[k]) for k in pa)
    assert a.position == b.position and a.model.slope == b.model.slope == pytest.approx(1.08)
    assert resumed.valid.bpc == whole.valid.bpc and resumed.sample == whole.sample

    run = str(tmp_path / "split")
    capsys.readouterr()
    assert evaluate_main([run, "--split", "test", "--device", "cpu"]) == 0
    assert "bits per character" in capsys.readouterr().out
    assert sample_main([run, "--prime", "the ", "--length", "10", "--seed", "1"]) == 0
    assert len(capsys.readouterr().out.rstrip("\n")) == 14
    assert boundaries_main([run, "--text", "the cat sat on the mat", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "layer 1" in out and "layer 2" not in out  # two layers: one boundary detector
    assert (tmp_path / "split" / "boundaries.html").is_file()


@pytest.mark.slow
def test_lstm_baseline_trains_and_has_no_boundaries(cfg, tmp_path, capsys):
    config = load_config(cfg, TINY + ["model.kind=lstm", "train.max_steps=4"])
    outcome = train(config, RunDir(tmp_path / "lstm"))
    assert outcome.stopped == "max_steps" and np.isfinite(outcome.valid.bpc)
    assert boundaries_main([str(tmp_path / "lstm"), "--text", "the cat"]) == 1
    assert "no boundary detectors" in capsys.readouterr().err


def test_hmlstm_nan_stops_the_run_and_leaves_the_last_checkpoint(cfg, tmp_path, monkeypatch):
    config = load_config(cfg, TINY + ["model.kind=hmlstm"])
    real_step = Trainer.train_step

    def poison_at_step_6(self, window):
        if self.position.step == 5:
            for _, array in mf.tree.named_leaves(self.model):
                array[...] = np.nan
                break
        return real_step(self, window)

    monkeypatch.setattr(Trainer, "train_step", poison_at_step_6)
    with pytest.raises(TrainingDiverged, match=r"the loss is nan at step 6 .*last good checkpoint"):
        train(config, RunDir(tmp_path / "run"))
    monkeypatch.setattr(Trainer, "train_step", real_step)
    saved = Trainer(config, RunDir(tmp_path / "run"), resume=True)
    saved.restore()
    assert saved.position.step == 4
    assert all(np.isfinite(a).all() for _, a in mf.tree.named_leaves(saved.model))


@pytest.mark.parametrize("form", ["branch", pytest.param("blend", marks=pytest.mark.slow)])
def test_the_compiled_step_trains_to_the_eager_steps_numbers_to_the_bit(cfg, tmp_path, short_corpus, form):
    """``train.compile = true`` (the default) and ``false`` give the same parameters, optimiser state,
    losses and validations, across epoch boundaries (state reset, slope annealed) and a checkpoint."""
    common = TINY + short_corpus + ["model.kind=hmlstm", f"model.cell_form={form}", "model.layer_norm=true"]
    runs = {}
    for compiled in (True, False):
        config = load_config(cfg, common + [f"train.compile={str(compiled).lower()}"])
        runs[compiled] = train(config, RunDir(tmp_path / str(compiled)))
        runs[compiled] = (runs[compiled], *final_parameters(config, tmp_path / str(compiled)))
    (a, ta, pa), (b, tb, pb) = runs[True], runs[False]
    assert a.position == b.position and a.position.epoch == 2
    assert pa.keys() == pb.keys() and all(pa[k].tobytes() == pb[k].tobytes() for k in pa)
    states = [[s.tobytes() for _, leaf in mf.optim.named_state_leaves(t.opt_state)
               for s in mf.tree.leaves(leaf.state, False)] for t in (ta, tb)]
    assert states[0] == states[1]
    assert a.valid.bpc == b.valid.bpc and a.sample == b.sample
    def numbers(compiled):
        records = [json.loads(line) for line in RunDir(tmp_path / str(compiled)).metrics.read_text().splitlines()]
        return [{k: v for k, v in r.items() if k not in ("chars_per_s", "seconds")} for r in records
                if r["kind"] in ("train", "valid")]

    assert numbers(True) == numbers(False) and len(numbers(True)) >= 8
