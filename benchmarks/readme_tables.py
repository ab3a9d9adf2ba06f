"""Regenerate the result tables of the README and of the docs pages from the benchmarks' output.

Every block of README.md and of every page ``docs/*.md`` between ``<!-- results:NAME -->`` and
``<!-- /results:NAME -->`` is replaced by the results of ``benchmarks/NAME.py``: rendered from
``benchmarks/results/NAME.json`` by that benchmark's ``table`` when the JSON is in the own-process
format (`_own_process.compare`: each framework in its own process, one core and all cores), else the
contents of ``benchmarks/results/NAME.md``. Blocks with neither are left as they are, and a page
whose blocks are already up to date is not written. Run it after a benchmark:
``python benchmarks/readme_tables.py``.
"""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import results_markdown  # noqa: E402
from _own_process import RESULTS_FORMAT  # noqa: E402
from minflux.files import write_atomically  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)


def block(name: str, results_dir: Path) -> str | None:
    """The text of results block ``name``, or None when ``results_dir`` has nothing for it.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "x.md").write_text("| a |\\n")
    >>> block("x", d), block("y", d)
    ('| a |\\n', None)
    """
    data_file, table_file = results_dir / f"{name}.json", results_dir / f"{name}.md"
    if data_file.exists():
        data = json.loads(data_file.read_text())
        if data.get("format") == RESULTS_FORMAT:
            spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return results_markdown(module.table(data), data["machine"])
    return table_file.read_text() if table_file.exists() else None


def regenerate(readme_text: str, results_dir: Path) -> tuple[str, list[str]]:
    """Return the README text with every results block refreshed, and the names refreshed.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "x.md").write_text("| a |\\n")
    >>> regenerate("<!-- results:x -->\\nold\\n<!-- /results:x -->", d)
    ('<!-- results:x -->\\n| a |\\n<!-- /results:x -->', ['x'])
    """
    refreshed = []

    def replace(match):
        body = block(match["name"], results_dir)
        if body is None:
            return match.group(0)
        refreshed.append(match["name"])
        return match.group(1) + body.rstrip("\n") + "\n" + match.group(4)

    return BLOCK.sub(replace, readme_text), refreshed


def pages(root: Path = ROOT) -> list[Path]:
    """The pages whose results blocks are regenerated: README.md, then every ``docs/*.md``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "docs").mkdir()
    >>> for name in ("README.md", "docs/b.md", "docs/a.md", "docs/notes.txt"): _ = (d / name).write_text("")
    >>> [str(p.relative_to(d)) for p in pages(d)]
    ['README.md', 'docs/a.md', 'docs/b.md']
    """
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def main() -> int:
    for page in pages():
        before = page.read_text()
        text, refreshed = regenerate(before, HERE / "results")
        if text != before:
            write_atomically(page, text)
        if refreshed:
            print(f"{page.relative_to(ROOT)}: refreshed", ", ".join(refreshed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
