"""The numba backend: input layouts, threads, branch forms, vectorisation and the on-disk cache."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import numba_backend
from minflux.compiler.layout import plan_layout
from minflux.runtime import settings


@pytest.mark.parametrize("shapes, shape, want", [
    ([(4, 1), (4, 5), ()], (4, 5), (4, 5, ("R", "F", "S"))),
    ([(1, 5), (4, 5)], (4, 5), (4, 5, ("C", "F"))),
    ([(3, 4), (3, 4)], (3, 4), (1, 12, ("F", "F"))),
    ([(2, 1, 4), (2, 3, 4)], (2, 3, 4), (6, 4, ("F", "F"))),      # no split fits: materialised
    ([(2, 3, 1), (1, 1, 4)], (2, 3, 4), (6, 4, ("R", "C"))),
    ([(7,), ()], (7,), (1, 7, ("F", "S"))),
])
def test_layouts(shapes, shape, want):
    arrays = [np.arange(int(np.prod(s))).reshape(s).astype(float) for s in shapes]
    rows, inner, total, patterns, flats, strides = plan_layout(arrays, shape)
    assert (rows, inner, patterns) == want
    assert total == int(np.prod(shape))
    assert strides == (inner,) * patterns.count("F")
    for p, flat in zip(patterns, flats):
        assert flat.flags.c_contiguous
        assert flat.size == {"F": total, "R": rows, "C": inner, "S": 1}[p]


def _both_backends(fn, *args):
    results = {}
    for name in ("numpy", "numba"):
        mf.set_elementwise_backend(name)
        try:
            results[name] = fn(*args)
        finally:
            mf.set_elementwise_backend("numba")
    return results["numpy"], results["numba"]


def test_odd_layouts_agree_with_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 1, 4))
    b = rng.standard_normal((5, 4)).T[:, :1]          # a non-contiguous (4, 1) view
    c = rng.standard_normal((3, 4, 1))
    f = lambda a, b, c: a * b - c if a > 0 else a + c  # noqa: E731
    ref, got = _both_backends(lambda *x: mf.broadcast(f, *x), a, b, c)
    assert got.shape == (3, 4, 4)
    np.testing.assert_allclose(got, ref, rtol=1e-14)
    empty = mf.broadcast(f, np.ones((0, 3)), 1.0, 2.0)
    assert empty.shape == (0, 3)


def test_threaded_rows_agree_with_numpy(monkeypatch):
    monkeypatch.setattr(numba_backend, "PARALLEL_MIN_ELEMENTS", 16)
    monkeypatch.setitem(settings._values, "num_threads", 3)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((37, 9)), rng.standard_normal((37, 1))
    f = lambda x, y: mf.tanh(x) * y if y > 0 else x  # noqa: E731
    ref, got = _both_backends(lambda x, y: mf.gradient(lambda x, y: mf.sum(mf.broadcast(f, x, y)), x, y), x, y)
    for a, b in zip(ref, got):
        np.testing.assert_allclose(b, a, rtol=1e-13)


def test_real_branches_and_selects_agree(monkeypatch):
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((6, 5)), rng.standard_normal((6, 5))

    def f(x, y):
        if x > 0:
            if y > 0.5:
                return x * y
            return mf.exp(y) - x
        return mf.sigmoid(x + y)

    results = []
    for form in ("select", "real"):
        monkeypatch.setitem(settings._values, "numba_branches", form)
        results.append(mf.gradient(lambda x, y: mf.sum(mf.broadcast(f, x, y) ** 2), x, y))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-14)


def _has_avx2() -> bool:
    try:
        return "avx2" in open("/proc/cpuinfo").read()
    except OSError:
        return False


@pytest.mark.skipif(not _has_avx2(), reason="needs an x86 CPU with AVX2")
def test_float32_cell_update_kernel_vectorises(tmp_path, monkeypatch):
    """The kernel loop compiles to packed SIMD code: the fast math and the selects are inlined."""
    monkeypatch.setenv("MINFLUX_CACHE_DIR", str(tmp_path))

    def cell(z, c, f, g):  # a fresh code object, compiled now (assembly of cached code is hidden)
        if z == 1:
            return mf.sigmoid(f) * mf.tanh(g)
        return mf.exp(c) - mf.log(1 + g * g)

    z = np.array([[1.0], [0.0]], np.float32)
    c = f = g = np.ones((2, 8), np.float32)
    mf.gradient(lambda c, f, g: mf.sum(mf.broadcast(cell, z, c, f, g)), c, f, g)
    from minflux.compiler import compiled_function as compiled_functions
    kernels = [k for _, k in compiled_functions.compiled(cell).kernels.values()]
    assert kernels
    for kernel in kernels:
        assert kernel.compiled_here
        asm = kernel.assembly()
        assert "ymm" in asm or "zmm" in asm



@pytest.mark.skipif(not _has_avx2(), reason="needs an x86 CPU with AVX2")
def test_kernel_with_a_dozen_partial_streams_still_vectorises(tmp_path, monkeypatch):
    """Twelve output streams need more pointer-overlap checks than LLVM allows by default."""
    monkeypatch.setenv("MINFLUX_CACHE_DIR", str(tmp_path))

    def update(z, zb, c, h, f, i, o, g):  # the HM-LSTM cell; a fresh code object, compiled now
        if z == 1:
            c_new = mf.sigmoid(i) * mf.tanh(g)
        elif zb == 0:
            return c, h
        else:
            c_new = mf.sigmoid(f) * c + mf.sigmoid(i) * mf.tanh(g)
        return c_new, mf.sigmoid(o) * mf.tanh(c_new)

    z = np.array([[1.0], [0.0]], np.float32)
    args = [np.ones((2, 8), np.float32) for _ in range(6)]

    def loss(*xs):
        c, h = mf.broadcast(update, z, 1.0 - z, *xs)
        return mf.sum(c) + mf.sum(h)

    mf.gradient(loss, *args)
    from minflux.compiler import compiled_function as compiled_functions
    (kernel,) = [k for _, k in compiled_functions.compiled(update).kernels.values()]
    assert kernel.compiled_here
    assert "vmulps" in kernel.assembly()

CHILD = textwrap.dedent("""
    import sys
    import numpy as np, minflux as mf
    from minflux.compiler import compiled_function as compiled_functions

    @mf.elementwise
    def soft(x, y):
        if x > y:
            return mf.tanh(x) * y
        return x - y

    x = np.linspace(-1, 1, 12).reshape(3, 4)
    g = mf.gradient(lambda x: mf.sum(soft(x, 0.25)), x)[0]
    compiled = [k.compiled_here for _, k in compiled_functions.compiled(soft.fn).kernels.values()]
    print(compiled, "numba" in sys.modules, repr(float(g.sum())))
""")


@pytest.mark.parametrize("compiler", ["llvm", "numba"])
def test_a_second_process_loads_kernels_from_the_disk_cache_without_numba(compiler, tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "MINFLUX_CACHE_DIR": str(tmp_path / "cache"), "MINFLUX_KERNEL_COMPILER": compiler}
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                           check=True).stdout.split() for _ in range(2)]
    assert runs[0][:2] == ["[True]", str(compiler == "numba")]   # compiled by LLVM alone, or by numba
    assert runs[1][:2] == ["[False]", "False"]   # object code linked back in; numba never imported
    assert runs[0][2] == runs[1][2]
    kernels = tmp_path / "cache" / "kernels"
    objects = list(kernels.glob("minflux_kernel_*.o"))
    assert len(objects) == 1 and objects[0].with_suffix(".json").exists()
    if compiler == "numba":
        source = objects[0].with_suffix(".py").read_text()
        assert "generated from the scalar function soft" in source


def test_a_damaged_object_file_is_recompiled(tmp_path, monkeypatch):
    from minflux.runtime import kernel_cache, kernel_loader
    monkeypatch.setenv("MINFLUX_CACHE_DIR", str(tmp_path))

    def twice(x):  # a fresh code object
        return x * 2 + 1

    np.testing.assert_array_equal(mf.broadcast(twice, np.ones(3)), [3.0, 3.0, 3.0])
    meta = next((tmp_path / "kernels").glob("*.json"))
    meta.write_text("{not json")
    assert kernel_cache.load(tmp_path / "kernels", meta.stem, 2) is None
    kernel_loader._loaded.clear()
    from minflux.compiler import compiled_function as compiled_functions
    compiled_functions._compiled.clear()
    np.testing.assert_array_equal(mf.broadcast(twice, np.ones(3)), [3.0, 3.0, 3.0])
    assert kernel_cache.load(tmp_path / "kernels", meta.stem, 2) is not None


@pytest.mark.skipif(not _has_avx2(), reason="needs an x86 CPU with AVX2")
@pytest.mark.parametrize("name", ["forward", "backward"])
def test_layer_norm_row_kernels_compile_to_packed_float32_arithmetic(name, tmp_path, monkeypatch):
    """The row loops vectorise: adds, subtracts and multiplies on packed singles in ymm/zmm registers."""
    import re

    from minflux.ops import layer_norm_rows
    from minflux.runtime import kernel_loader

    monkeypatch.setenv("MINFLUX_CACHE_DIR", str(tmp_path))   # compiled here, so its assembly is known
    monkeypatch.setattr(kernel_loader, "_loaded", {})
    kernel = kernel_loader.load_ir_kernel(layer_norm_rows.kernel_ir(name, "float32"), "minflux_layer_norm",
                                         {"forward": 7, "backward": 8}[name])
    packed = re.findall(r"\bv(?:add|sub|mul|fn?m(?:add|sub)\w*)ps\s+%[yz]mm", kernel.assembly())
    assert len(packed) >= 4


def test_the_key_changes_when_code_inlined_into_kernels_changes(tmp_path, monkeypatch):
    """Elementwise kernels are loaded under the generator's version (`load_kernel(generator=...)`),
    which follows every module whose text shapes their machine code."""
    import shutil
    import types

    from minflux.compiler import compiled

    asked = []
    monkeypatch.setattr(numba_backend, "load_kernel", lambda *args: asked.append(args) or types.SimpleNamespace())
    numba_backend.build_kernel(compiled(lambda x: x * 2.0).dual_for(("f",), ()), np.float64, ("F",))
    before = numba_backend.generator_version()
    assert asked[0][-1] == before
    copy = tmp_path / "compiler"
    shutil.copytree(numba_backend._SOURCE_DIR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(numba_backend, "_SOURCE_DIR", copy)
    monkeypatch.setattr(numba_backend, "_generator_text", None)
    assert numba_backend.generator_version() == before
    fastmath = copy / "fastmath.py"
    fastmath.write_text(fastmath.read_text() + "\n# a changed polynomial\n")
    monkeypatch.setattr(numba_backend, "_generator_text", None)
    assert numba_backend.generator_version() != before


@pytest.mark.skipif(mf.get_elementwise_backend() != "numba", reason="numba kernels only")
def test_a_launch_reading_a_numpy_scalar_is_a_command_whose_cell_each_call_writes():
    """The scalar has no address of its own: the command reads a cell, written from each call's
    scalar of the type it was made for, and declines one of another type."""
    from minflux.compiler.compiled_function import compiled, prepare
    from minflux.runtime import native_runner

    cf = compiled(lambda x, s: x * s)
    kinds, float_dtype, arrays, shape = prepare([np.arange(3.0), np.float64(2.0)], "times")
    launcher = cf.numba_launcher(cf.dual_for(kinds, ()), arrays, float_dtype, shape)
    out = np.empty(3)
    command = launcher.command(arrays, [out])
    write, reads = command.refresh
    assert reads(arrays) == [arrays[1]]
    program = np.array([-1, *command.words], np.int64)
    for s in (np.float64(5.0), np.float64(-0.5)):
        assert write([arrays[0], s])
        native_runner.run(program, 1, len(program))
        assert out.tolist() == (np.arange(3.0) * s).tolist()
    assert not write([arrays[0], np.float32(7.0)])


@pytest.mark.parametrize("view", ["column", "every other row", "transposed", "reversed"])
def test_a_strided_input_is_gathered_by_rows_of_bytes_or_not_at_all(view):
    from minflux.runtime import native_runner

    base = np.arange(48.0).reshape(6, 8)
    a = {"column": base[:, 3:4], "every other row": base[::2, 1:6], "transposed": base.T,
         "reversed": base[::-1]}[view]
    into = np.empty(a.shape)
    command = numba_backend._gather(a, into)
    if view in ("transposed", "reversed"):
        assert command is None
        return
    program = np.array([-1, *command.words], np.int64)
    native_runner.run(program, 1, len(program))
    assert into.tolist() == a.tolist()
