"""docs/config.md lists every config key with its type, default and meaning, and matches the code."""
import dataclasses
import tomllib
from pathlib import Path

import pytest

from minflux_train.config import Config, bounded, setting
from minflux_train.config_reference import key_rows, main, reference_markdown
from minflux_train.resume import RESUMABLE, flat

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "config.md"


def test_docs_config_md_is_the_generated_reference():
    assert PAGE.read_text() == reference_markdown(), (
        "docs/config.md is out of date: regenerate it with python -m train.config_reference --out docs/config.md")


def test_every_key_is_listed_once_with_a_meaning():
    rows = key_rows()
    assert [r.key for r in rows] == list(flat(Config()))
    assert all(len(r.meaning) > 10 for r in rows)
    page = PAGE.read_text()
    for r in rows:
        assert page.count(f"| `{r.key}` |") == 1, r.key


def test_the_listed_defaults_are_the_defaults():
    defaults = flat(Config())
    for r in key_rows():
        assert tomllib.loads(f"v = {r.default}")["v"] == defaults[r.key], r.key


def test_types_choices_bounds_and_resumability_are_shown():
    rows = {r.key: r for r in key_rows()}
    assert rows["model.hidden_sizes"].type == "list of integer"
    assert rows["optim.lr"].type == "number" and rows["optim.lr"].allowed == "> 0.0"
    assert rows["train.max_steps"].allowed == ">= 0 (0: no limit other than epochs)"
    assert rows["model.kind"].allowed == '`"hmlstm"`, `"lstm"`'
    assert {k for k, r in rows.items() if r.resumable} == set(RESUMABLE)


def test_a_key_without_a_meaning_is_refused():
    @dataclasses.dataclass
    class Partly:
        documented: int = bounded(1, at_least=0, doc="a documented key")
        undocumented: int = 2

    with pytest.raises(ValueError, match="config key undocumented has no doc"):
        key_rows(Partly)
    assert key_rows(dataclasses.make_dataclass("Fine", [("x", str, setting("", "a string key"))]))[0].key == "x"


def test_the_command_prints_or_writes_the_reference(tmp_path, capsys):
    assert main([]) == 0
    assert capsys.readouterr().out == reference_markdown()
    assert main(["--out", str(tmp_path / "docs" / "config.md")]) == 0
    assert (tmp_path / "docs" / "config.md").read_text() == reference_markdown()
