"""Source lookup and free-name resolution of scalar functions."""
from __future__ import annotations

import linecache

import numpy as np
import pytest

import minflux as mf
from minflux.compiler.errors import CompileError
from minflux.compiler.source import Binding, resolve_free_name, source_node

SCALE = 2.0


def scaled(x):
    return SCALE * x


def test_free_names_resolve_like_python_closure_then_globals_then_builtins():
    offset = 3.0

    def f(x):
        return x + offset

    assert resolve_free_name(f, "offset") == 3.0
    assert resolve_free_name(scaled, "SCALE") == 2.0
    assert resolve_free_name(scaled, "abs") is abs
    with pytest.raises(NameError):
        resolve_free_name(scaled, "no_such_name")


def test_a_binding_notices_a_changed_global(monkeypatch):
    binding = Binding(scaled, "SCALE", 2.0)
    assert binding.still_valid()
    monkeypatch.setitem(scaled.__globals__, "SCALE", 3.0)
    assert not binding.still_valid()
    np.testing.assert_array_equal(mf.broadcast(scaled, np.ones(2)), [3.0, 3.0])  # recompiled


def test_exec_code_compiles_once_its_text_is_registered():
    src = "def tripled(x):\n    return 3.0 * x\n"
    name = "<minflux-test-tripled>"
    namespace: dict = {}
    exec(compile(src, name, "exec"), namespace)
    with pytest.raises(CompileError, match="register its text"):
        source_node(namespace["tripled"])
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    try:
        node, filename, _ = source_node(namespace["tripled"])
        assert node.name == "tripled" and filename == name
        np.testing.assert_array_equal(mf.broadcast(namespace["tripled"], np.ones(1)), [3.0])
    finally:
        del linecache.cache[name]


def test_a_closure_constant_is_kept_by_its_bits_so_signed_zeros_get_their_own_kernels():
    def make(z):
        return lambda x: x / z

    x = np.ones(3)
    with np.errstate(divide="ignore"):
        for z in (-0.0, 0.0, -0.0, float("nan"), 0.0):
            got = mf.broadcast(make(z), x)
            assert got.tobytes() == (x / z).tobytes()
