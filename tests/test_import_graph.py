"""The package's import structure: no cycles inside minflux; the runtime at the bottom, importing
only itself (and the atomic writes and version of `minflux.files` and `minflux._version`); the
compiler above it, importing only itself, the runtime and `minflux.backend`, and reached from the
rest of minflux only through its face (`minflux/compiler/__init__.py`); recorded schedules importing
nothing else of minflux but the runtime (settings, and the native runner their commands run on); and models/ and train/ imported by their installed names, minflux_models and
minflux_train.

Imports are read from the source with `ast` (top-level and function-level alike), so the check
does not depend on what happens to be imported when the test runs.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "minflux"
RUNTIME = "minflux.runtime"     # settings, threads, kernel loading, the allocator, the product provider
RUNTIME_MAY_IMPORT = {"minflux.files", "minflux._version"}   # atomic writes and the version in cache keys
COMPILER = "minflux.compiler"   # the scalar-function compiler; its __init__ is its face
COMPILER_MAY_IMPORT = {"minflux.backend"}   # the array module of the values it is given
SCHEDULE = "minflux.schedule"   # recorded schedules, importing nothing else of minflux but the runtime


def inside(module: str, package: str) -> bool:
    """True when ``module`` is ``package`` or one of its modules."""
    return module == package or module.startswith(package + ".")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the minflux modules it imports (``from . import x`` resolves to the module x)."""
    paths = {module_name(p, root): p for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets = [f"{module}.{a.name}" for a in node.names] + [module]
            else:
                continue
            for target in targets:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
                    break
    for name in list(graph):  # importing a.b.c from outside a.b runs a/b/__init__ first
        for target in list(graph[name]):
            package = target.rpartition(".")[0]
            while package.count("."):
                if package not in (name, target) and not name.startswith(package + "."):
                    graph[name].add(package)
                package = package.rpartition(".")[0]
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_cycle_an_upward_import_and_an_inner_module(tmp_path):
    pkg = tmp_path / "minflux"
    (pkg / "compiler").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import a\n")
    (pkg / "a.py").write_text("def f():\n    from .b import g\n")
    (pkg / "b.py").write_text("from minflux.a import f\nfrom .compiler import g\n")
    (pkg / "c.py").write_text("from .compiler.ir import h\n")
    (pkg / "compiler" / "__init__.py").write_text("g = 1\n")
    (pkg / "compiler" / "ir.py").write_text("from ..a import f\n")
    graph = import_graph(pkg)
    assert cycles(graph) == [["minflux.a", "minflux.b"]]
    assert graph["minflux.compiler.ir"] == {"minflux.a"}
    assert graph["minflux.b"] == {"minflux.a", "minflux.compiler"}
    assert graph["minflux.c"] == {"minflux.compiler", "minflux.compiler.ir"}


def test_no_import_cycles_inside_minflux():
    assert cycles(import_graph()) == []


def test_the_runtime_imports_only_itself_files_and_version():
    graph = import_graph()
    assert {m for m in graph if inside(m, RUNTIME)} >= {RUNTIME, RUNTIME + ".settings", RUNTIME + ".threads"}
    upward = {(m, t) for m, targets in graph.items() if inside(m, RUNTIME)
              for t in targets if not inside(t, RUNTIME) and t not in RUNTIME_MAY_IMPORT}
    assert upward == set()


def test_the_compiler_imports_only_itself_the_runtime_and_backend():
    """Nothing of tapes, Tensors, recorded schedules or any layer built on the compiler."""
    graph = import_graph()
    upward = {(m, t) for m, targets in graph.items() if inside(m, COMPILER)
              for t in targets if not inside(t, COMPILER) and not inside(t, RUNTIME) and t not in COMPILER_MAY_IMPORT}
    assert upward == set()


def test_code_outside_the_compiler_imports_only_its_face():
    """`minflux.compiler`, never `minflux.compiler.<module>` (tests may look inside)."""
    graph = import_graph()
    inner = {(m, t) for m, targets in graph.items() if not inside(m, COMPILER)
             for t in targets if inside(t, COMPILER) and t != COMPILER}
    assert inner == set()


def test_the_compiler_face_exports_what_it_names():
    import minflux.compiler as face

    assert [name for name in face.__all__ if not hasattr(face, name)] == []


def test_recorded_schedules_import_nothing_else_of_minflux_but_the_runtime():
    graph = import_graph()
    upward = {(m, t) for m, targets in graph.items() if inside(m, SCHEDULE)
              for t in targets if not inside(t, SCHEDULE) and not inside(t, RUNTIME)}
    assert upward == set()


@pytest.mark.parametrize("module", ["minflux.pointwise", "minflux.runtime.kernel_cache",
                                    "minflux.pointwise.functions", "minflux.pointwise.launch",
                                    "minflux.compiler.compiled_function", "minflux.runtime.gemm_report"])
def test_modules_import_by_their_path(module):
    import importlib

    assert importlib.import_module(module).__name__ == module


def top_level_imports(path: Path) -> set[str]:
    """The top-level names of the absolute imports in ``path``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.partition(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module.partition(".")[0])
    return names


@pytest.mark.parametrize("folder", ["minflux", "models", "train", "tests"])
def test_models_and_train_are_imported_by_their_installed_names(folder):
    """``import train`` or ``import models`` works only where the checkout is on the path, and there it
    loads a second copy beside minflux_train / minflux_models (a second HMLSTM class, a second table of
    model builders); inside their own package they import relatively."""
    wrong = {str(p.relative_to(REPO)): names for p in (REPO / folder).rglob("*.py")
             if (names := top_level_imports(p) & {"train", "models"})}
    assert wrong == {}


@pytest.mark.parametrize("folder, allowed", [("minflux", {"minflux"}), ("models", {"minflux"}),
                                             ("train", {"minflux", "minflux_models"})])
def test_each_layer_imports_only_the_layers_below_it_by_name(folder, allowed):
    """models/ and train/ reach themselves relatively: ``python -m train`` in a checkout imports train/
    as ``train``, and an absolute ``minflux_train`` import there would load it a second time."""
    ours = {"minflux", "minflux_models", "minflux_train"}
    wrong = {str(p.relative_to(REPO)): names for p in (REPO / folder).rglob("*.py")
             if (names := top_level_imports(p) & ours - allowed)}
    assert wrong == {}


def layout_directories(readme: str) -> set[str]:
    """The directories the tree of the README's Layout section names: one a line, written ``name/`` at
    the start of the line, nested two spaces a level (deeper indentation continues a description)."""
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    tree = section.split("```\n", 1)[1].split("```", 1)[0]
    named, parents = set(), []
    for line in tree.splitlines():
        match = re.match(r"( *)([\w.-]+)/(?:\s|$)", line)
        if match is None or len(match[1]) % 2 or len(match[1]) // 2 > len(parents):
            continue
        depth = len(match[1]) // 2
        parents[depth:] = [match[2]]
        named.add("/".join(parents))
    return named


def test_the_layout_reader_follows_the_nesting():
    readme = ("# x\n\n## Layout\n\n```\nminflux/     the framework\n  ops/       ops, and/or\n"
              "                 more words/ of a description\n  nn/ optim/   two on one line\n"
              "models/      models\n```\n\n## Next\n\n```\nother/\n```\n")
    assert layout_directories(readme) == {"minflux", "minflux/ops", "minflux/nn", "models"}


def test_the_readme_layout_names_every_package_and_only_what_exists():
    named = layout_directories((REPO / "README.md").read_text())
    missing = sorted(name for name in named if not (REPO / name).is_dir())
    packages = {str(init.parent.relative_to(REPO)) for top in ("minflux", "models", "train")
                for init in (REPO / top).rglob("__init__.py")}
    assert missing == [] and sorted(packages - named) == []
    assert {"minflux/runtime", "minflux/compiled", "minflux/schedule", "benchmarks", "tests"} <= named
