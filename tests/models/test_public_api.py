"""The models are built from the public minflux API only: they import the package (``import minflux
as mf``) and read names from it, never from its modules."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import minflux as mf

MODELS = sorted((Path(__file__).resolve().parents[2] / "models").glob("*.py"))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_models_import_only_the_package_and_use_its_exported_names(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "minflux":
            pytest.fail(f"{path.name}:{node.lineno} imports from {node.module}; use `import minflux as mf`")
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert alias.name.split(".")[0] != "minflux" or alias.name == "minflux", \
                    f"{path.name}:{node.lineno} imports {alias.name}; use `import minflux as mf`"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "mf":
            assert node.attr in mf.__all__ or node.attr in {"nn", "optim", "tree", "testing"}, \
                f"{path.name}:{node.lineno} uses mf.{node.attr}, which minflux does not export"
