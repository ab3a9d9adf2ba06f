"""One table of settings: every MINFLUX_* variable is a row of it, a bad value is one line naming the
variable and what it accepts (at first use, never at import), and the guard key holds every
setting a recording depends on."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minflux as mf
from minflux.compiled import guard
from minflux.runtime import settings

PACKAGE = Path(mf.__file__).parent


def environment_names(path: Path) -> set[str]:
    """The MINFLUX_* names the code of ``path`` spells as whole strings (docstrings and messages aside)."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and re.fullmatch(r"MINFLUX_[A-Z_]+", node.value)
            and id(node) not in docstrings}


def test_every_minflux_variable_is_read_through_the_table():
    table = {s.variable for s in settings.SETTINGS}
    outside = {str(p.relative_to(PACKAGE)): names for p in PACKAGE.rglob("*.py")
               if p.parent.name != "runtime" and (names := environment_names(p))}
    assert outside == {}, f"read outside minflux.runtime.settings: {outside}"
    assert environment_names(PACKAGE / "runtime" / "settings.py") == table


BAD = [("MINFLUX_GEMM", "bogus", "auto, mkl or numpy", "import minflux as mf, numpy as np; "
        "mf.matmul(np.ones((64, 64), np.float32), np.ones((64, 64), np.float32))"),
       ("MINFLUX_NUM_THREADS", "0", "a whole number of at least 1", "import minflux as mf; mf.get_num_threads()"),
       ("MINFLUX_NUM_THREADS", "abc", "a whole number of at least 1", "import minflux as mf; mf.get_num_threads()"),
       ("MINFLUX_NUM_THREADS", "2.5", "a whole number of at least 1", "import minflux as mf; mf.get_num_threads()"),
       ("MINFLUX_MAX_LOOP_ITERATIONS", "abc", "a whole number", "import minflux as mf; mf.get_max_loop_iterations()"),
       ("MINFLUX_COMPILE_CHECK", "junk", "1, true, yes or on", "import minflux as mf; mf.compile(abs)"),
       ("MINFLUX_KEEP_FREED_MEMORY", "junk", "1, true, yes or on",
        "from minflux.runtime import allocator; allocator.keep_freed_memory()"),
       ("MINFLUX_FUSION", "maybe", "1, true, yes or on", "import minflux as mf; mf.set_fusion()")]


@pytest.mark.parametrize("variable, value, accepts, use", BAD)
def test_a_bad_value_is_one_line_at_first_use_and_import_still_works(variable, value, accepts, use, tmp_path):
    env = {"PATH": "/usr/bin:/bin", "MINFLUX_CACHE_DIR": str(tmp_path), variable: value}
    imported = subprocess.run([sys.executable, "-c", "import minflux"], env=env, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    used = subprocess.run([sys.executable, "-c", use], env=env, capture_output=True, text=True)
    last = used.stderr.strip().splitlines()[-1]
    assert used.returncode != 0
    assert last.startswith(f"minflux.runtime.settings.SettingError: {variable}={value!r} is not valid: it accepts")
    assert accepts in last and "unset it for the default" in last


@pytest.fixture
def fresh_branches(monkeypatch):
    """The numba branch setting as in a process that has not read it yet (put back afterwards)."""
    monkeypatch.setattr(settings, "_set", {k: v for k, v in settings._set.items() if k != "numba_branches"})
    monkeypatch.setattr(settings, "_values", {k: v for k, v in settings._values.items() if k != "numba_branches"})


def test_the_environment_is_read_at_first_use_and_a_set_value_wins_until_unset(monkeypatch, fresh_branches):
    monkeypatch.setenv("MINFLUX_NUMBA_BRANCHES", "real")
    assert settings.get("numba_branches") == "real"
    monkeypatch.setenv("MINFLUX_NUMBA_BRANCHES", "select")
    assert settings.get("numba_branches") == "real"          # read once
    settings.set("numba_branches", "auto")
    assert settings.get("numba_branches") == "auto"
    settings.unset("numba_branches")
    assert settings.get("numba_branches") == "select" and settings.chosen("numba_branches")


@pytest.mark.parametrize("setting", [s for s in settings.SETTINGS if s.recorded])
def test_every_recorded_setting_is_in_the_guard_key(setting, monkeypatch):
    before = guard.flatten([np.ones(2), {}, abs]).key
    other = {bool: lambda v: not v, int: lambda v: v + 1, str: lambda v: v + "-other"}[type(setting.default_value())]
    monkeypatch.setitem(settings._values, setting.name, other(settings.get(setting.name)))
    assert guard.flatten([np.ones(2), {}, abs]).key != before


def test_the_table_prints_every_row():
    done = subprocess.run([sys.executable, "-m", "minflux.runtime.settings_report"], capture_output=True,
                          text=True, check=True)
    assert all(f"`{s.variable}`" in done.stdout for s in settings.SETTINGS) and done.stderr == ""
