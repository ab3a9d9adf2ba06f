"""Regenerate the README's result tables from the benchmarks' Markdown output.

Every block of README.md between ``<!-- results:NAME -->`` and ``<!-- /results:NAME -->`` is replaced
by the contents of ``benchmarks/results/NAME.md``. Blocks whose results file does not exist are left
as they are. Run it after a benchmark: ``python benchmarks/readme_tables.py``.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from minflux.files import write_atomically

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- results:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results:(?P=name) -->)", re.S)


def regenerate(readme_text: str, results_dir: Path) -> tuple[str, list[str]]:
    """Return the README text with every results block refreshed, and the names refreshed.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "x.md").write_text("| a |\\n")
    >>> regenerate("<!-- results:x -->\\nold\\n<!-- /results:x -->", d)
    ('<!-- results:x -->\\n| a |\\n<!-- /results:x -->', ['x'])
    """
    refreshed = []

    def replace(match):
        source = results_dir / f"{match['name']}.md"
        if not source.exists():
            return match.group(0)
        refreshed.append(match["name"])
        body = source.read_text().rstrip("\n") + "\n"
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(replace, readme_text), refreshed


def main() -> int:
    readme = ROOT / "README.md"
    text, refreshed = regenerate(readme.read_text(), ROOT / "benchmarks" / "results")
    write_atomically(readme, text)
    print("refreshed:", ", ".join(refreshed) or "nothing")
    return 0


if __name__ == "__main__":
    sys.exit(main())
