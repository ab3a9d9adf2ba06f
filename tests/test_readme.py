"""Every Python block of the README and of every page under docs/ runs when pasted alone, output shown
after a block is what it prints, the links between the pages resolve, and the result tables come from
benchmark output."""
import re
import runpy
from pathlib import Path

import pytest

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEXT = {str(page.relative_to(ROOT)): page.read_text() for page in PAGES}
README = TEXT["README.md"]
NOT_A_FENCE = r"(?:(?!```).)*"
PRINTS = re.compile(rf"```python\n(?P<code>{NOT_A_FENCE})```\n{NOT_A_FENCE}?[Ss]aved as `(?P<name>[\w.]+)` and run, "
                    rf"the example prints:\n\n```\n(?P<output>{NOT_A_FENCE})```", re.S)
RESULTS = re.compile(r"<!-- results:([\w-]+) -->")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


BLOCKS = [(name, i + 1, block) for name, text in TEXT.items() for i, block in enumerate(python_blocks(text))]


def test_readme_and_docs_have_python_examples():
    assert len(python_blocks(README)) >= 2
    assert {name for name, _, _ in BLOCKS} > {"README.md"}


def test_blocks_are_found_and_run_each_in_a_namespace_of_its_own(tmp_path, monkeypatch):
    text = "a\n```python\nx = 1\n```\nb\n```bash\nls\n```\n```python\nassert 'x' not in globals()\n```\n"
    assert python_blocks(text) == ["x = 1\n", "assert 'x' not in globals()\n"]
    for block in python_blocks(text):
        run_alone(block, tmp_path, monkeypatch)
    with pytest.raises(NameError):
        run_alone("print(np)\n", tmp_path, monkeypatch)  # a block that needs an earlier one fails


def run_alone(block: str, folder: Path, monkeypatch, name: str = "readme_block.py") -> None:
    """Run ``block`` as its own script ``name`` (scalar functions need a source file) in an empty
    folder, with fresh globals: what pasting it alone into a new interpreter does."""
    monkeypatch.chdir(folder)
    script = folder / name
    script.write_text(block)
    runpy.run_path(str(script), run_name="__main__")


@pytest.mark.parametrize("page, number, block", BLOCKS, ids=[f"{name}:block{i}" for name, i, _ in BLOCKS])
def test_each_block_runs_pasted_alone(page, number, block, tmp_path, monkeypatch):
    run_alone(block, tmp_path, monkeypatch)


def shown_outputs() -> list[tuple[str, str, str, str]]:
    """(page, script name, code, output) for every block followed by what it prints."""
    return [(page, m["name"], m["code"], m["output"]) for page, text in TEXT.items() for m in PRINTS.finditer(text)]


def test_shown_outputs_are_found():
    text = ("```python\nprint('hi')\n```\n\nSaved as `a.py` and run, the example prints:\n\n```\nhi\n```\n"
            "```python\nprint(1)\n```\n```bash\nls\n```\nsaved as `b.py` and run, the example prints:\n\n```\n1\n```\n")
    assert [(m["name"], m["code"], m["output"]) for m in PRINTS.finditer(text)] == [("a.py", "print('hi')\n", "hi\n")]
    assert any(name == "compile_step.py" for _, name, _, _ in shown_outputs())   # the NotReplayable message


@pytest.mark.parametrize("page, name, code, output", shown_outputs(), ids=[f"{p}:{n}" for p, n, _, _ in shown_outputs()])
def test_shown_output_is_what_the_block_prints(page, name, code, output, tmp_path, monkeypatch, capsys):
    run_alone(code, tmp_path, monkeypatch, name)
    assert capsys.readouterr().out == output


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, spelt as GitHub spells them."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_links_between_the_pages_resolve():
    broken = []
    for name, text in TEXT.items():
        folder = (ROOT / name).parent
        for target, anchor in re.findall(r"\]\((?!https?:)([^)#\s]*)(?:#([^)\s]*))?\)", text):
            path = (folder / target) if target else ROOT / name
            if not path.exists() or (anchor and anchor not in anchors(path.read_text())):
                broken.append(f"{name}: {target}#{anchor}")
    assert broken == []


def test_every_docs_page_is_linked_from_the_readme():
    assert [name for name in TEXT if name != "README.md" and f"]({name})" not in README] == []


def test_readme_tables_regenerate_from_results(tmp_path):
    tables = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))
    (tmp_path / "speed.md").write_text("| new |\n")
    text = "a\n<!-- results:speed -->\n| old |\n<!-- /results:speed -->\n<!-- results:gone -->\nkeep\n<!-- /results:gone -->\n"
    out, refreshed = tables["regenerate"](text, tmp_path)
    assert refreshed == ["speed"]
    assert "| new |" in out and "| old |" not in out and "keep" in out


def test_the_tables_of_the_readme_and_of_every_docs_page_are_regenerated():
    tables = runpy.run_path(str(ROOT / "benchmarks" / "readme_tables.py"))
    assert tables["pages"]() == PAGES
    names = [n for text in TEXT.values() for n in RESULTS.findall(text)]
    assert "hmlstm_step" in names and len(names) == len(set(names))     # each table on one page
    assert [n for n in names if not list((ROOT / "benchmarks").glob(f"{n}.*"))] == []   # each from a benchmark
