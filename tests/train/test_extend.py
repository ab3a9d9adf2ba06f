"""A finished run trained further (--resume with a larger train.max_steps) keeps the end validation
of its first finish in metrics.jsonl and in the plot's validation curve."""
import json

import pytest

from minflux_train.__main__ import main
from minflux_train.plot import curves
from minflux_train.runs import RunDir

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def records(out):
    return [json.loads(line) for line in RunDir(out).metrics.read_text().splitlines()]


def test_extending_a_finished_run_keeps_its_final_validation_point(cfg, tmp_path, tiny_model):
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=7", "--quiet"]) == 0
    first_end = records(out)[-1]
    assert first_end["kind"] == "end" and first_end["step"] == 7 and "valid_bpc" in first_end
    assert main(["--out", str(out), "--resume", "--set", "train.max_steps=14", "--quiet"]) == 0
    after = records(out)
    ends = [r for r in after if r["kind"] == "end"]
    assert ends[0] == first_end and [e["step"] for e in ends] == [7, 14]
    steps, bpcs = curves(after)["valid"]
    assert steps == [5, 7, 10, 14] and bpcs[1] == first_end["valid_bpc"]
    keys = [(r["kind"], r["step"]) for r in after]
    assert len(keys) == len(set(keys))  # still one record per kind and step
    # resumed again with nothing to train, nothing is added or lost
    assert main(["--out", str(out), "--resume", "--quiet"]) == 0
    assert records(out) == after


def test_the_plot_of_an_extended_run_draws_both_end_validations(cfg, tmp_path, tiny_model):
    pytest.importorskip("matplotlib")
    from minflux_train.plot import plot_run

    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=7", "--quiet"]) == 0
    assert main(["--out", str(out), "--resume", "--set", "train.max_steps=14", "--quiet"]) == 0
    import matplotlib.pyplot as plt

    drawn = {}
    real_plot = plt.Axes.plot

    def plot(self, *args, **kwargs):
        if kwargs.get("label") == "validation":
            drawn["valid"] = list(args[0])
        return real_plot(self, *args, **kwargs)

    plt.Axes.plot = plot
    try:
        assert plot_run(out).is_file()
    finally:
        plt.Axes.plot = real_plot
    assert drawn["valid"] == [5, 7, 10, 14]
