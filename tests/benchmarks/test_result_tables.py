"""The own-process benchmarks' README tables render from their JSON, in both settings, with CPU / wall
(invalid above 1.05 on one core); an older JSON without the format falls back to the Markdown file.
The results are made up here: nothing is timed."""
import json
import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from _own_process import RESULTS_FORMAT  # noqa: E402

ONE_CORE_RATIOS = [1.0, 1.2]   # the second process of every implementation used more than one core


def made_up(impls, cases) -> dict:
    """What `_own_process.compare` returns, with made-up numbers."""
    def case(impl):
        out = {"seconds": 0.002, "cpu_per_wall": 1.0, "cpu_per_wall_runs": [1.0], "samples": [[0.002, 0.002]],
               "max_error": 0.0, "peak_mib": 3.0, "ops": 12}
        return out if impl == "copy" else dict(out, first_call_s=0.5)

    def settings(ratios):
        return {impl: {"cpu_per_wall": max(ratios), "cpu_per_wall_runs": ratios,
                       "cases": {c: case(impl) for c in cases}} for impl in impls}

    return {"format": RESULTS_FORMAT, "rounds": 2, "cores": 2, "missing": {"jax": "ImportError: no jax"},
            "settings": {"one": settings(ONE_CORE_RATIOS), "all": settings([1.9, 1.9])}}


def results(name: str) -> dict:
    labels = runpy.run_path(str(BENCHMARKS / f"{name}.py"))["LABELS"]
    impls = [i for i in labels if i != "jax"]
    common = {"versions": "torch 0", "machine": "a test machine"}
    if name == "cell_update":
        return dict(common, format=RESULTS_FORMAT, dims=[8, 16], repeats=3,
                    malloc={m: made_up(impls, ["8", "16"]) for m in ("default", "reuse")})
    cases, extra = {"arity": (["1", "2"], {"arities": [1, 2], "dims": 8}),
                    "fusion": (["2", "4"], {"ks": [2, 4], "dims": 8}),
                    "tape_overhead": (["16", "256"], {"sizes": {"16": 3, "256": 3}, "layers": 2}),
                    "optim_update": (["update"], {"parameters": 1000, "arrays": 3})}[name]
    return dict(made_up(impls, cases), **common, **extra)


@pytest.mark.parametrize("name", ["cell_update", "arity", "fusion", "tape_overhead", "optim_update"])
def test_table_renders_from_json_in_both_settings(name, tmp_path):
    (tmp_path / f"{name}.json").write_text(json.dumps(results(name)))
    text = runpy.run_path(str(BENCHMARKS / "readme_tables.py"))["block"](name, tmp_path)
    assert "| one core |" in text and "| all cores (2) |" in text
    assert "CPU / wall" in text and "1.20 (invalid)" in text and "1.90 (invalid)" not in text
    assert "Not run: JAX jit (ImportError: no jax)." in text or name == "optim_update"
    assert text.endswith("Measured on: a test machine.\n")


def test_json_of_an_older_format_falls_back_to_the_markdown(tmp_path):
    (tmp_path / "arity.json").write_text(json.dumps({"dims": 1024, "results": {}}))
    (tmp_path / "arity.md").write_text("| old table |\n")
    assert runpy.run_path(str(BENCHMARKS / "readme_tables.py"))["block"]("arity", tmp_path) == "| old table |\n"


def test_benchmarks_time_only_after_minflux_learned_how_to_run_its_calls():
    """The untimed calls before a case cover a learned choice's trials of both ways."""
    from _own_process import WARMUP_CALLS

    from minflux.runtime.split_choice import TRIES

    assert WARMUP_CALLS >= 2 * TRIES
