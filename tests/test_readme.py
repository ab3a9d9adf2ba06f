"""Every Python block of the README runs when pasted alone, and its result tables come from benchmark
output."""
import re
import runpy
from pathlib import Path

import pytest

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_python_examples():
    assert len(python_blocks(README)) >= 2


def test_blocks_are_found_and_run_each_in_a_namespace_of_its_own(tmp_path, monkeypatch):
    text = "a\n```python\nx = 1\n```\nb\n```bash\nls\n```\n```python\nassert 'x' not in globals()\n```\n"
    assert python_blocks(text) == ["x = 1\n", "assert 'x' not in globals()\n"]
    for block in python_blocks(text):
        run_alone(block, tmp_path, monkeypatch)
    with pytest.raises(NameError):
        run_alone("print(np)\n", tmp_path, monkeypatch)  # a block that needs an earlier one fails


def run_alone(block: str, folder: Path, monkeypatch) -> None:
    """Run ``block`` as its own script (scalar functions need a source file) in an empty folder, with
    fresh globals: what pasting it alone into a new interpreter does."""
    monkeypatch.chdir(folder)
    script = folder / "readme_block.py"
    script.write_text(block)
    runpy.run_path(str(script), run_name="__main__")


@pytest.mark.parametrize("block", python_blocks(README),
                         ids=[f"block{i + 1}" for i in range(len(python_blocks(README)))])
def test_each_readme_block_runs_pasted_alone(block, tmp_path, monkeypatch):
    run_alone(block, tmp_path, monkeypatch)


def test_readme_tables_regenerate_from_results(tmp_path):
    tables = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))
    (tmp_path / "speed.md").write_text("| new |\n")
    text = "a\n<!-- results:speed -->\n| old |\n<!-- /results:speed -->\n<!-- results:gone -->\nkeep\n<!-- /results:gone -->\n"
    out, refreshed = tables["regenerate"](text, tmp_path)
    assert refreshed == ["speed"]
    assert "| new |" in out and "| old |" not in out and "keep" in out
