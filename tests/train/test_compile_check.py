"""`train.compile_check_every`: a run checks a replay against the eager step now and then, and a
difference stops it with `mf.ReplayMismatch` rather than train on."""
import numpy as np
import pytest

import minflux as mf
from minflux.compiled import outputs
from minflux_train.__main__ import main
from minflux_train.config import load_config
from minflux_train.loop import train
from minflux_train.runs import RunDir

pytestmark = pytest.mark.numpy_kernels


def test_every_nth_step_is_checked_and_a_clean_run_passes(cfg, tmp_path, tiny_model, monkeypatch):
    checked = []
    real = mf.CompiledStep.checked

    def counting(self, *args, **kwargs):
        checked.append(self.replays)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(mf.CompiledStep, "checked", counting)
    train(load_config(cfg, ["train.max_steps=12", "train.compile_check_every=4"]), RunDir(tmp_path / "run"))
    assert len(checked) == 3          # steps 4, 8 and 12


def test_a_replay_that_differs_stops_the_run_naming_what_differed(cfg, tmp_path, tiny_model, monkeypatch, capsys):
    real_compare = outputs.compare

    def corrupting(expected, got, what):
        if "the arguments" in what:
            leaf = mf.tree.leaves(got[0], trainable_only=False)[0]
            leaf.reshape(-1)[0] = np.nextafter(leaf.reshape(-1)[0], np.inf)
        return real_compare(expected, got, what)

    monkeypatch.setattr("minflux.compiled.step.compare", corrupting)
    status = main(["--config", str(cfg), "--out", str(tmp_path / "run"), "--set", "train.max_steps=6",
                   "--set", "train.compile_check_every=3"])
    err = capsys.readouterr().err
    assert status == 1 and "error:" in err and "check=True): the arguments after the call differs at" in err
