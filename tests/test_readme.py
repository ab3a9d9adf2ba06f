"""The README's Python examples run as written, and its result tables come from benchmark output."""
import re
import runpy
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_readme_has_python_examples():
    assert len(python_blocks(README)) >= 2


def test_readme_examples_run_in_order(tmp_path, monkeypatch):
    """All Python blocks, concatenated, run as one script (scalar functions need a source file)."""
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "readme_examples.py"
    script.write_text("\n".join(python_blocks(README)))
    runpy.run_path(str(script), run_name="readme_examples")


def test_readme_tables_regenerate_from_results(tmp_path):
    tables = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))
    (tmp_path / "speed.md").write_text("| new |\n")
    text = "a\n<!-- results:speed -->\n| old |\n<!-- /results:speed -->\n<!-- results:gone -->\nkeep\n<!-- /results:gone -->\n"
    out, refreshed = tables["regenerate"](text, tmp_path)
    assert refreshed == ["speed"]
    assert "| new |" in out and "| old |" not in out and "keep" in out
