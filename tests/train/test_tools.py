"""evaluate, sample, boundaries and plot on a finished tiny run (stand-in model)."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minflux_train.boundaries
import minflux_train.plot
from minflux_train.__main__ import main as train_main
from minflux_train.boundaries import main as boundaries_main, render_terminal
from minflux_train.evaluate import evaluate_tokens, main as evaluate_main
from minflux_train.sample import main as sample_main, pick
from minflux_train.data import StreamBatcher

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


@pytest.fixture
def run_dir(cfg, tmp_path, tiny_model):
    out = tmp_path / "run"
    assert train_main(["--config", str(cfg), "--out", str(out), "--quiet"]) == 0
    return out


class Uniform:
    """Predicts every symbol with equal probability: exactly log2(V) bits per character."""

    def __init__(self, vocab_size):
        self.v = vocab_size

    def initial_state(self, batch):
        return [{"h": np.zeros((batch, 1))}]

    def __call__(self, tokens, state):
        return np.zeros(tokens.shape + (self.v,)), state, None


def test_evaluate_counts_every_character_once_and_reports_streams():
    tokens = np.arange(103) % 7
    result = evaluate_tokens(Uniform(7), tokens, batch_size=5, seq_len=4)
    assert result.chars == 102 and result.streams == 5
    assert result.bpc == pytest.approx(math.log2(7))
    assert StreamBatcher(tokens, 5, 4).targets_per_epoch == 102


def test_evaluate_cli(run_dir, capsys):
    assert evaluate_main([str(run_dir), "--split", "test", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "test:" in out and "bits per character" in out and "streams" in out


def test_a_reopened_run_runs_blas_on_one_thread_before_it_computes(run_dir):
    """The tools evaluate outside gradient, where the model's products are numpy's own: BLAS must be
    on one thread before the first of them (its threads spin; beside busy loops an evaluation took
    several times its CPU)."""
    probe = ("import json, sys; from threadpoolctl import threadpool_info; import minflux_train.runs as runs; "
             "from tests.train.conftest import TinyLM; "
             "runs.MODEL_BUILDERS['hmlstm'] = lambda cfg, vocab_size, **common: TinyLM(vocab_size, **common); "
             "blas = lambda: sorted({i['num_threads'] for i in threadpool_info() if i['user_api'] == 'blas'}); "
             "before = blas(); runs.open_run(sys.argv[1], 'best', 'cpu'); print(json.dumps([before, blas()]))")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", probe, str(run_dir)], env=env, capture_output=True,
                          text=True, timeout=120, cwd=root)
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout.strip().splitlines()[-1])
    assert after == [1] and (before != [1] or (os.cpu_count() or 1) == 1)


def test_sample_cli_and_temperature_zero_is_deterministic(run_dir, capsys):
    assert sample_main([str(run_dir), "--prime", "the ", "--length", "25", "--temperature", "0"]) == 0
    first = capsys.readouterr().out
    assert sample_main([str(run_dir), "--prime", "the ", "--length", "25", "--temperature", "0"]) == 0
    assert capsys.readouterr().out == first and first.startswith("the ") and len(first.rstrip("\n")) == 29


def test_pick_follows_the_distribution():
    rng = np.random.default_rng(0)
    logits = np.log(np.array([0.2, 0.8]))
    draws = [pick(logits, 1.0, rng) for _ in range(4000)]
    assert abs(np.mean(draws) - 0.8) < 0.03
    sharp = [pick(logits, 0.25, rng) for _ in range(2000)]  # p ∝ (0.2, 0.8)^4
    assert abs(np.mean(sharp) - 256 / 257) < 0.01


def test_boundaries_cli_prints_and_writes_html(run_dir, capsys):
    assert boundaries_main([str(run_dir), "--text", "the cat sat", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "text    the cat sat" in out and "layer 1" in out
    page = (run_dir / "boundaries.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "http" not in page
    assert page.count('class="c"') == len("the cat sat")


def test_boundaries_cli_prints_the_rate_by_position_in_the_word_over_a_file(run_dir, tmp_path, capsys):
    from minflux_train.runs import open_run

    text = "the cat sat on the mat. a dog ran in the fog. " * 3
    (tmp_path / "some.txt").write_text(text)
    assert boundaries_main([str(run_dir), "--file", str(tmp_path / "some.txt"), "--batch-size", "1",
                            "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    run = open_run(run_dir, "best", "cpu")
    tokens = run.vocab.encode(text)
    _, _, z = run.model(tokens[None, :-1], run.model.initial_state(1))     # one stream: the whole text
    z = np.asarray(z)[0, :, 0]
    by_position, position = {}, 0
    for ch, fired, flushes in zip(text[:-1], z, np.concatenate([[0.0], z[:-1]])):
        position = 0 if ch in " \n_" else position + 1
        by_position.setdefault(min(position, 9), []).append((fired, flushes))
    assert "| position in word | characters | layer 1: z = 1 after it | layer 1: flushes on it |" in out
    for k, seen in by_position.items():
        label = "separator" if k == 0 else f"letter {k}" + ("+" if k == 9 else "")
        fired, flushes = np.mean(seen, axis=0)
        assert f"| {label} | {len(seen):,} | {fired:.1%} | {flushes:.1%} |" in out


def test_render_terminal_marks_each_layer():
    z = np.array([[1, 0], [0, 0], [1, 1]])
    assert render_terminal(list("abc"), z) == "text    abc\nlayer 1 | |\nlayer 2   |"


def test_plot_without_matplotlib_says_how_to_install(run_dir, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert minflux_train.plot.main([str(run_dir)]) == 1
    assert "pip install 'minflux[plot]'" in capsys.readouterr().err


def test_plot_with_matplotlib(run_dir):
    pytest.importorskip("matplotlib")
    path = minflux_train.plot.plot_run(run_dir)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_boundaries_cli_writes_a_png_with_the_word_starts_beside_the_html(run_dir, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    import minflux_train.boundary_picture as picture

    marked = {}
    real = picture.render_png

    def remember(symbols, z, target, title, width):
        marked["starts"] = real(symbols, z, target, title, width)
        marked["symbols"] = symbols
        return marked["starts"]

    monkeypatch.setattr(minflux_train.boundaries, "render_png", remember)
    assert boundaries_main([str(run_dir), "--text", "the cat sat", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    png = run_dir / "boundaries.png"
    assert f"wrote {png} (3 word starts marked)" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 2000
    assert marked["starts"] == [0, 4, 8] and "".join(marked["symbols"]) == "the cat sat"


def test_boundaries_without_matplotlib_write_the_html_and_say_why_there_is_no_png(run_dir, capsys,
                                                                                 monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert boundaries_main([str(run_dir), "--text", "the cat", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "no PNG: matplotlib is not installed (pip install 'minflux[plot]')" in out
    assert (run_dir / "boundaries.html").is_file() and not (run_dir / "boundaries.png").exists()
