"""mf.load(strict=False): what matches loads, the rest is left alone and reported with a reason."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import minflux as mf
from minflux.io import CheckpointMismatch

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def classifier(n_classes, seed, extra=False):
    rng = np.random.default_rng(seed)
    layers = [mf.nn.Dense(4, 8, mf.tanh, rng=rng), mf.nn.Dense(8, n_classes, rng=rng)]
    if extra:
        layers.append(mf.nn.LayerNorm(n_classes))
    return mf.nn.Chain(*layers)


def test_fine_tuning_from_a_checkpoint_with_another_head(tmp_path, caplog):
    pretrained = classifier(3, seed=0)
    path = mf.save(tmp_path / "pre.h5", model=pretrained, step=7)
    model = classifier(5, seed=1, extra=True)
    head_before = model.layers[1].W.copy()
    body_array = model.layers[0].W
    with caplog.at_level(logging.INFO, logger="minflux.io"):
        report = mf.load(path, model=model, strict=False)
    assert report["step"] == 7 and report.meta == {"step": 7}
    np.testing.assert_array_equal(model.layers[0].W, pretrained.layers[0].W)
    assert model.layers[0].W is body_array            # loaded in place
    np.testing.assert_array_equal(model.layers[1].W, head_before)
    assert report.loaded["model"] == ["layers.0.W", "layers.0.b"]
    skipped = report.skipped["model"]
    assert skipped["layers.1.W"] == "the checkpoint has float32[8, 3], the target float32[8, 5]"
    assert skipped["layers.1.b"] == "the checkpoint has float32[3], the target float32[5]"
    assert skipped["layers.2.scale"] == "missing from the checkpoint"
    assert "layers.1.W" in caplog.text and "skipped 4" in caplog.text


def test_checkpoint_entries_the_target_lacks_are_reported(tmp_path):
    path = mf.save(tmp_path / "c.h5", model={"a": np.ones(2), "old": np.ones(3)})
    target = {"a": np.zeros(2)}
    report = mf.load(path, model=target, strict=False)
    np.testing.assert_array_equal(target["a"], [1.0, 1.0])
    assert report.skipped["model"] == {"old": "in the checkpoint but not in the target"}
    assert "skipped 1" in report.describe()


def test_optimiser_state_loads_where_it_fits(tmp_path):
    pretrained = classifier(3, seed=0)
    state = mf.optim.setup(mf.optim.Adam(1e-3), pretrained)
    grads, = mf.gradient(lambda m: mf.sum(m(np.ones((2, 4), np.float32))), pretrained)
    mf.optim.update(state, pretrained, grads)
    path = mf.save(tmp_path / "c.h5", model=pretrained, opt_state=state)
    model = classifier(5, seed=1)
    new_state = mf.optim.setup(mf.optim.Adam(1e-3), model)
    report = mf.load(path, model=model, opt_state=new_state, strict=False)
    np.testing.assert_array_equal(new_state.layers[0].W.state[0], state.layers[0].W.state[0])
    assert new_state.layers[0].W.state[2] == 1 and new_state.layers[1].W.state[2] == 0
    assert set(report.skipped["opt_state"]) == {"layers.1.W", "layers.1.b"}
    other_rule = mf.optim.setup(mf.optim.Momentum(), classifier(3, seed=2))
    report = mf.load(path, opt_state=other_rule, strict=False)
    assert report.loaded["opt_state"] == []
    assert "the checkpoint has Adam, the target Momentum" in report.skipped["opt_state"]["layers.0.W"]


def test_strict_load_still_refuses_and_changes_nothing(tmp_path):
    path = mf.save(tmp_path / "c.h5", model=classifier(3, seed=0))
    model = classifier(5, seed=1)
    before = model.layers[0].W.copy()
    with pytest.raises(CheckpointMismatch, match="layers.1.W"):
        mf.load(path, model=model)
    np.testing.assert_array_equal(model.layers[0].W, before)


def test_a_strict_load_reports_everything_loaded(tmp_path):
    path = mf.save(tmp_path / "c.h5", model={"w": np.ones(2)}, step=1)
    report = mf.load(path, model={"w": np.zeros(2)})
    assert report.loaded["model"] == ["w"] and report.skipped == {"model": {}, "opt_state": {}}
    assert report.describe() == "loaded 1 model array and 0 optimiser leaves; skipped nothing"


def test_a_partial_load_says_when_the_optimiser_is_left_with_two_learning_rates(tmp_path, caplog):
    pretrained = classifier(3, seed=0)
    path = mf.save(tmp_path / "c.h5", model=pretrained,
                   opt_state=mf.optim.setup(mf.optim.Adam(1e-3), pretrained))
    model = classifier(5, seed=1)
    state = mf.optim.setup(mf.optim.Adam(1e-2), model)
    with caplog.at_level(logging.WARNING, logger="minflux.io"):
        report = mf.load(path, model=model, opt_state=state, strict=False)
    lrs = {name: leaf.rule.lr for name, leaf in mf.optim.named_state_leaves(state)}
    assert lrs == {"layers.0.W": 1e-3, "layers.0.b": 1e-3, "layers.1.W": 1e-2, "layers.1.b": 1e-2}
    expected = ("the optimiser now has two sets of hyperparameters: Adam.lr = 0.001 on the 2 leaves loaded "
                "from the checkpoint, 0.01 on the 2 leaves left as they were; set one value with "
                "mf.optim.adjust(opt_state, lr=...)")
    assert report.notes == [expected]
    assert report.describe().splitlines()[-1] == f"note: {expected}"
    assert expected in caplog.text and "WARNING" in caplog.text
    mf.optim.adjust(state, lr=1e-2)  # what the note says to do gives every leaf one rate
    assert {leaf.rule.lr for _, leaf in mf.optim.named_state_leaves(state)} == {1e-2}


def test_a_partial_load_with_equal_hyperparameters_has_no_note(tmp_path):
    pretrained = classifier(3, seed=0)
    path = mf.save(tmp_path / "c.h5", model=pretrained,
                   opt_state=mf.optim.setup(mf.optim.Adam(1e-3), pretrained))
    model = classifier(5, seed=1)
    report = mf.load(path, model=model, opt_state=mf.optim.setup(mf.optim.Adam(1e-3), model), strict=False)
    assert report.notes == [] and "note:" not in report.describe()
