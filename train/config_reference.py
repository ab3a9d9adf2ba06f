"""The reference of every config key (type, default, allowed values, meaning), generated from the
config dataclasses in `train.config`: ``python -m train.config_reference --out docs/config.md``.

A test compares docs/config.md with `reference_markdown`, so the page cannot drift from the code.

>>> rows = key_rows()
>>> next(r for r in rows if r.key == "train.max_steps").default
'0'
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from pathlib import Path
from typing import NamedTuple

from minflux.files import write_atomically

from .cli import command, prog
from .config import Config, _toml_value
from .resume import RESUMABLE

HEADER = """# Config reference

Every key of a training config (`configs/*.toml`, `--set KEY=VALUE`), generated from the dataclasses
in `train/config.py` by `python -m train.config_reference --out docs/config.md`; do not edit by hand.
A key that is not listed here, a value of the wrong type or outside its allowed values is an error
at load that names the key and the file. The keys marked in the last column may change when a run is
continued with `--resume` (by `--set` or by editing the run's `config.toml`); the others define the
model, the data and the batch shape of a run and are fixed.
"""


class KeyRow(NamedTuple):
    """One config key as the reference shows it."""

    key: str
    type: str
    default: str
    allowed: str
    meaning: str
    resumable: bool


def _type(tp) -> str:
    if typing.get_origin(tp) is list:
        return f"list of {_type(typing.get_args(tp)[0])}"
    return {int: "integer", float: "number", bool: "boolean", str: "string"}[tp]


def _allowed(metadata) -> str:
    if metadata.get("choices"):
        return ", ".join(f"`{_toml_value(c)}`" for c in metadata["choices"])
    bounds = []
    if metadata.get("above") is not None:
        bounds.append(f"> {metadata['above']}")
    if metadata.get("at_least") is not None:
        bounds.append(f">= {metadata['at_least']}")
    text = " and ".join(bounds)
    return f"{text} ({metadata['note']})" if metadata.get("note") else text


def key_rows(cls=Config, section: str = "") -> list[KeyRow]:
    """Every key of ``cls`` (nested tables flattened to ``section.key``), in declaration order.

    A field without a ``doc`` is a `ValueError`: every key must say what it means.
    """
    rows, hints, defaults = [], typing.get_type_hints(cls), cls()
    for f in dataclasses.fields(cls):
        key = f"{section}.{f.name}" if section else f.name
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += key_rows(tp, key)
            continue
        doc = f.metadata.get("doc")
        if not doc:
            raise ValueError(f"config key {key} has no doc; declare it with setting/choice/bounded(doc=...)")
        rows.append(KeyRow(key, _type(tp), _toml_value(getattr(defaults, f.name)), _allowed(f.metadata),
                           doc, key in RESUMABLE))
    return rows


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def reference_markdown() -> str:
    """The config reference as Markdown: one table per config table (top level first)."""
    sections: dict[str, list[KeyRow]] = {}
    for row in key_rows():
        sections.setdefault(row.key.rpartition(".")[0], []).append(row)
    out = [HEADER]
    for section, rows in sections.items():
        out.append(f"## [{section}]\n" if section else "## Top level\n")
        out.append("| key | type | default | allowed | meaning | `--resume` |")
        out.append("|---|---|---|---|---|---|")
        for r in rows:
            out.append(f"| `{r.key}` | {r.type} | `{_cell(r.default)}` | {_cell(r.allowed)} | "
                       f"{_cell(r.meaning)} | {'may change' if r.resumable else ''} |")
        out.append("")
    return "\n".join(out)


@command
def main(argv: list[str] | None = None) -> int:
    """``python -m train.config_reference [--out FILE]``: print the reference, or write it to FILE."""
    parser = argparse.ArgumentParser(prog=prog("train.config_reference"),
                                     description="Print the reference of every config key as Markdown.")
    parser.add_argument("--out", type=Path, default=None, help="write it to this file (e.g. docs/config.md)")
    args = parser.parse_args(argv)
    text = reference_markdown()
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(args.out, text)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
