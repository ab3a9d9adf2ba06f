"""The commands a run prints (how to continue it, what to run next) are spelt the way it was started:
``minflux-train`` prints the console scripts, ``python -m`` prints ``python -m`` commands."""
import sys

import pytest

from minflux_train.__main__ import main
from minflux_train.cli import _PACKAGE

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_a_run_started_as_the_console_script_prints_console_script_commands(cfg, tmp_path, tiny_model,
                                                                           monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/home/me/.venv/bin/minflux-train", "--config", str(cfg)])
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=4", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"raise train.max_steps: minflux-train --out {out} --resume --set train.max_steps=8" in printed
    assert f"next: minflux-evaluate {out} --split test | minflux-sample {out} --prime" in printed
    assert f"minflux-boundaries {out} --text" in printed and f"minflux-plot {out}" in printed
    assert "python -m" not in printed
    assert main(["--out", str(out), "--resume", "--quiet"]) == 0  # nothing left: the recorded end stands
    assert f"minflux-evaluate {out} validates again" in capsys.readouterr().out


def test_an_interrupted_console_script_run_says_how_to_continue_it_so(cfg, tmp_path, tiny_model, monkeypatch,
                                                                     capsys, interrupt):
    monkeypatch.setattr(sys, "argv", ["minflux-train"])
    interrupt.ctrl_c()
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--quiet"]) == 130
    assert f"continue with: minflux-train --out {out} --resume" in capsys.readouterr().out


def test_a_run_started_with_python_m_prints_python_m_commands(cfg, tmp_path, tiny_model, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [f"/src/minflux/{_PACKAGE}/__main__.py"])
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--set", "train.max_steps=4", "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert f"python -m {_PACKAGE} --out {out} --resume --set train.max_steps=8" in printed
    assert f"next: python -m {_PACKAGE}.evaluate {out}" in printed and "minflux-" not in printed
