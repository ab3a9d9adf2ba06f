"""The kernel cache on disk: damaged object code is recompiled (never linked), files others can
change are never linked, entries are private to the user, and the key follows the loader (the
elementwise compiler's generator is in its kernels' keys too: tests/compiler/test_numba_backend.py).

Damage is tested in fresh processes, because linking broken machine code kills a process (SIGSEGV)
rather than raising an exception."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from minflux.runtime import kernel_cache

CHILD = textwrap.dedent("""
    import numpy as np, minflux as mf
    from minflux.runtime import kernel_loader

    def affine(x):
        return x * 3.0 + 1.0

    out = mf.broadcast(affine, np.arange(4.0))
    print(repr(out.tolist()), any(k.compiled_here for k in kernel_loader._loaded.values()))
""")
EXPECTED = repr([1.0, 4.0, 7.0, 10.0])


@pytest.fixture
def child(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "MINFLUX_CACHE_DIR": str(tmp_path / "cache")}

    def run():
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        value, compiled_here = done.stdout.rsplit(" ", 1)
        assert value == EXPECTED
        return compiled_here.strip() == "True", done.stderr

    run.kernels = tmp_path / "cache" / "kernels"
    return run


def test_entries_are_private_and_linked_back_by_a_new_process(child):
    compiled, _ = child()
    assert compiled
    assert stat.S_IMODE(os.stat(child.kernels).st_mode) == 0o700
    files = list(child.kernels.iterdir())
    assert {f.suffix for f in files} == {".o", ".json"}
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files)
    compiled, stderr = child()
    assert not compiled and stderr == ""


def _damage_cases(code: bytes):
    rng = np.random.default_rng(7)
    for fraction in (0.0, 0.5, 0.99):
        yield f"truncated to {fraction:.0%}", code[:int(len(code) * fraction)]
    for _ in range(2):
        flipped = bytearray(code)
        for position in rng.integers(0, len(code), size=3):
            flipped[position] ^= 1 << int(rng.integers(0, 8))
        yield "bit flips", bytes(flipped)


# a child process per kind of damage: slow; the quick subset recompiles a truncated object file in
# tests/ops/test_layer_norm_rows.py
@pytest.mark.slow
def test_damaged_object_code_is_recompiled_with_one_warning(child):
    child()
    (object_file,) = child.kernels.glob("*.o")
    original = object_file.read_bytes()
    for what, damaged in _damage_cases(original):
        object_file.write_bytes(damaged)
        compiled, stderr = child()
        assert compiled, what
        assert stderr.count("is damaged") == 1, (what, stderr)
        assert object_file.read_bytes() == original, what   # the recompiled entry replaced it


def test_a_forged_entry_for_another_kernel_is_not_linked(child, tmp_path):
    child()
    (meta_file,) = child.kernels.glob("*.json")
    key = meta_file.stem
    other = "minflux_kernel_" + "0" * 24
    for suffix in (".o", ".json"):
        shutil.copy(child.kernels / f"{key}{suffix}", child.kernels / f"{other}{suffix}")
    meta = json.loads((child.kernels / f"{other}.json").read_text())
    meta["key"] = other
    (child.kernels / f"{other}.json").write_text(json.dumps(meta))
    assert kernel_cache.load(child.kernels, other, 2) is None   # its symbol names another kernel
    assert kernel_cache.load(child.kernels, key, 2) is not None


def test_a_cache_others_can_write_is_never_linked_from(child):
    child()
    os.chmod(child.kernels, 0o770)
    compiled, stderr = child()
    assert compiled and "writable by its group or by others" in stderr and stderr.count("\n") == 1
    os.chmod(child.kernels, 0o700)
    (object_file,) = child.kernels.glob("*.o")
    os.chmod(object_file, 0o666)
    compiled, stderr = child()
    assert compiled and "that others can change" in stderr


def test_the_key_changes_when_the_loader_changes(tmp_path, monkeypatch):
    before = kernel_cache.cache_key("source")
    copy = tmp_path / "runtime"
    shutil.copytree(kernel_cache._SOURCE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(kernel_cache, "_SOURCE_DIR", copy)
    monkeypatch.setattr(kernel_cache, "_versions_text", None)
    assert kernel_cache.cache_key("source") == before
    loader = copy / "kernel_loader.py"
    loader.write_text(loader.read_text() + "\n# a changed way of compiling\n")
    monkeypatch.setattr(kernel_cache, "_versions_text", None)
    assert kernel_cache.cache_key("source") != before
