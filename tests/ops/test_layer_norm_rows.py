"""layer_norm's row kernels: compiled and cached like every kernel (private files, object code checked
and linked back by a new process, damage recompiled), skipped under the numpy elementwise backend with
the same values, and never reached for empty rows."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import minflux as mf
from minflux.ops import layer_norm_rows, normalisation

CHILD = textwrap.dedent("""
    import numpy as np, minflux as mf
    from minflux.runtime import kernel_loader
    x = np.arange(12.0).reshape(3, 4) ** 1.5
    g = mf.gradient(lambda x, s, b: mf.sum(mf.layer_norm(x, s, b) * x), x, np.ones(4), np.zeros(4))
    print(repr(np.round(g[0], 9).tolist()), any(k.compiled_here for k in kernel_loader._loaded.values()))
""")


def expected_gradient():
    """d/dx sum(layer_norm(x) * x) by the closed form, with x held as the weights."""
    x = np.arange(12.0).reshape(3, 4) ** 1.5
    centred, var = x - x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    r = 1 / np.sqrt(var + 1e-5)
    xhat = centred * r
    return r * (x - x.mean(-1, keepdims=True) - xhat * (x * xhat).mean(-1, keepdims=True)) + xhat


@pytest.fixture
def child(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)

    def run(**env):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              env={**os.environ, "MINFLUX_CACHE_DIR": str(tmp_path / "cache"), **env})
        assert done.returncode == 0, done.stderr
        value, compiled_here = done.stdout.rsplit(" ", 1)
        np.testing.assert_allclose(eval(value), expected_gradient(), rtol=1e-7, atol=1e-8)
        return compiled_here.strip() == "True", done.stderr

    run.kernels = tmp_path / "cache" / "kernels"
    return run


def test_kernels_are_private_cache_entries_linked_back_by_a_new_process(child):
    compiled, _ = child()
    assert compiled
    files = sorted(child.kernels.iterdir())
    suffixes = [f.suffix for f in files]   # forward, backward, and the gradient's other kernels
    assert suffixes.count(".json") == suffixes.count(".o") >= 2 and len(suffixes) == 2 * suffixes.count(".o")
    assert all(stat.S_IMODE(os.stat(f).st_mode) == 0o600 for f in files)
    compiled, stderr = child()
    assert not compiled and stderr == ""


def test_damaged_object_code_is_recompiled_not_linked(child):
    child()
    for object_file in child.kernels.glob("*.o"):
        object_file.write_bytes(object_file.read_bytes()[:100])
    compiled, stderr = child()
    assert compiled and "damaged" in stderr


def test_the_numpy_elementwise_backend_compiles_no_kernel(child):
    compiled, _ = child(MINFLUX_ELEMENTWISE="numpy")
    assert not compiled and not child.kernels.exists()


@pytest.fixture
def numpy_backend():
    before = mf.get_elementwise_backend()
    mf.set_elementwise_backend("numpy")
    yield
    mf.set_elementwise_backend(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_numpy_backend_gives_the_kernels_values(dtype, rng, request):
    x, w = rng.standard_normal((4, 7)).astype(dtype), rng.standard_normal((4, 7)).astype(dtype)
    scale, shift = rng.standard_normal(7).astype(dtype), rng.standard_normal(7).astype(dtype)

    def run():
        out = mf.layer_norm(x, scale, shift)
        return [out, *mf.gradient(lambda x, s, b: mf.sum(mf.layer_norm(x, s, b) * w), x, scale, shift)]

    assert layer_norm_rows.usable(x, scale, shift)
    kernels = run()
    request.getfixturevalue("numpy_backend")
    assert not normalisation._compiled_rows(x, scale, shift)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for from_kernel, from_numpy in zip(kernels, run()):
        assert from_numpy.dtype == dtype
        np.testing.assert_allclose(from_numpy, from_kernel, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("backend", ["numba", "numpy"])
@pytest.mark.parametrize("shape", [(3, 0), (0,), (2, 1, 0), (0, 4)], ids=str)
def test_empty_rows_give_empty_results_and_zero_parameter_gradients(shape, backend, rng):
    before = mf.get_elementwise_backend()
    mf.set_elementwise_backend(backend)
    try:
        x, columns = rng.standard_normal(shape), shape[-1]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            out = mf.layer_norm(x, np.ones(columns), np.zeros(columns))
            g_x, g_scale, g_shift = mf.gradient(lambda x, s, b: mf.sum(mf.layer_norm(x, s, b)), x,
                                                np.ones(columns), np.zeros(columns))
    finally:
        mf.set_elementwise_backend(before)
    assert out.shape == shape and g_x.shape == shape
    np.testing.assert_array_equal(g_scale, np.zeros(columns))
    np.testing.assert_array_equal(g_shift, np.zeros(columns))



@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_row_kernels_write_into_given_arrays_in_place_or_by_copy(dtype, rng):
    """A schedule's replay passes ``out=`` arrays: C-contiguous ones are written in place, others get a
    copy, None is a new array; the values are those of a call without ``out=``."""
    x, g = rng.standard_normal((2, 3, 5)).astype(dtype), rng.standard_normal((2, 3, 5)).astype(dtype)
    scale, shift = rng.standard_normal(5).astype(dtype), rng.standard_normal(5).astype(dtype)
    want = normalisation._forward_rows(x, scale, shift, 1e-5)
    outs = [np.empty((2, 3, 5), dtype), np.empty((5, 6), dtype).T, None]
    got = normalisation._forward_rows(x, scale, shift, 1e-5, out=outs)
    assert got[0] is outs[0] and got[1] is outs[1]
    assert [a.tobytes() for a in got] == [a.tobytes() for a in want]
    for sv in (scale, None):
        want_back = normalisation._backward_rows(g, want[1], want[2], sv)
        outs = [np.empty((2, 3, 5), dtype), None if sv is None else np.empty(10, dtype)[::2], np.empty(5, dtype)]
        got_back = normalisation._backward_rows(g, want[1], want[2], sv, out=outs)
        assert (got_back[1] is None) == (sv is None) and got_back[2] is outs[2]
        assert [None if a is None else a.tobytes() for a in got_back] == \
            [None if a is None else a.tobytes() for a in want_back]
