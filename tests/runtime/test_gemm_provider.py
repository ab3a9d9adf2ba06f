"""MKL's GEMM as the matrix product's provider: values, the layouts it takes and refuses, bits that do
not depend on memory alignment, no threads of its own, and the MINFLUX_GEMM switch."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from minflux.runtime import gemm_provider
from minflux.runtime.gemm_provider import gemm

needs_mkl = pytest.mark.skipif(gemm is None, reason="the mkl wheel is not installed (pip install 'minflux[mkl]') "
                                                   "or MINFLUX_GEMM turned it off")
INSTALLED = gemm_provider._library_path() is not None


def operands(layout: str, m: int, k: int, n: int, dtype, rng):
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    if layout == "transposed":
        a, b = np.asfortranarray(a), np.asfortranarray(b)
    elif layout == "slices":      # rows of a wider array; columns of a taller Fortran-ordered one
        a = rng.standard_normal((m, k + 5)).astype(dtype)[:, 2:2 + k]
        b = np.asfortranarray(rng.standard_normal((k + 3, n)).astype(dtype))[1:1 + k]
    return a, b


@needs_mkl
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["row-major", "transposed", "slices"])
@pytest.mark.parametrize("m, k, n", [(32, 257, 512), (1, 9, 1), (70, 3, 1), (5, 128, 33)])
def test_products_equal_float64_within_rounding(layout, m, k, n, dtype):
    rng = np.random.default_rng(m * k + n)
    a, b = operands(layout, m, k, n, dtype, rng)
    wide = np.full((m, n + 4), np.nan, dtype)
    out = wide[:, 1:1 + n]                     # a column block of a wider result, as split products write
    assert gemm(a, b, out)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(out - exact) <= 4 * k * np.finfo(dtype).eps * bound)
    assert np.isnan(wide[:, 0]).all() and np.isnan(wide[:, 1 + n:]).all()   # nothing outside the block


@needs_mkl
@pytest.mark.parametrize("case", ["integers", "mixed dtypes", "broadcast", "reversed", "every other column",
                                  "empty", "transposed result", "read-only result"])
def test_what_it_cannot_read_in_place_is_left_to_numpy(case):
    a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    out = np.zeros((4, 5), np.float32)
    if case == "integers":
        a, b, out = a.astype(int), b.astype(int), out.astype(int)
    elif case == "mixed dtypes":
        b = b.astype(np.float64)
    elif case == "broadcast":
        a = np.broadcast_to(np.ones(3, np.float32), (4, 3))
    elif case == "reversed":
        a = a[::-1]
    elif case == "every other column":
        b = np.ones((3, 10), np.float32)[:, ::2]
    elif case == "empty":
        a, b, out = np.ones((4, 0), np.float32), np.ones((0, 5), np.float32), out
    elif case == "transposed result":
        out = np.zeros((5, 4), np.float32).T
    else:
        out.flags.writeable = False
    assert gemm(a, b, out) is False
    assert not out.any()


@needs_mkl
def test_the_bits_do_not_depend_on_where_the_arrays_lie():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 2049)).astype(np.float32), rng.standard_normal((2049, 513)).astype(np.float32)
    first = np.empty((64, 513), np.float32)
    assert gemm(a, b, first)
    for shift in (1, 3, 7, 13):                # 4, 12, 28 and 52 bytes past a 64-byte boundary
        pool = np.empty(a.size + b.size + 64 * 513 + 64, np.float32)
        base = (-pool.ctypes.data // 4) % 16 + shift
        a2 = pool[base:base + a.size].reshape(a.shape)
        b2 = pool[base + a.size:base + a.size + b.size].reshape(b.shape)
        out = pool[base + a.size + b.size:base + a.size + b.size + first.size].reshape(first.shape)
        a2[...], b2[...] = a, b
        assert gemm(a2, b2, out)
        np.testing.assert_array_equal(out, first)


@needs_mkl
def test_mkl_runs_on_the_calling_thread_only():
    tasks = lambda: len(os.listdir("/proc/self/task"))   # noqa: E731
    before = tasks()
    a = np.ones((2000, 2000), np.float32)
    out = np.empty_like(a)
    assert gemm(a, a, out) and tasks() == before


def provider_in_a_child(setting: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, MINFLUX_GEMM=setting)
    return subprocess.run([sys.executable, "-c", "import minflux.runtime.gemm_provider as g; print(g.provider)"],
                          env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("setting, expected", [("numpy", "numpy"), ("NumPy ", "numpy"),
                                               ("auto", "mkl" if INSTALLED else "numpy")])
def test_minflux_gemm_chooses_the_library(setting, expected):
    done = provider_in_a_child(setting)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_an_unknown_library_is_one_clear_error():
    done = provider_in_a_child("openblas")
    assert done.returncode != 0
    assert "MINFLUX_GEMM='openblas' is not valid: it accepts auto, mkl or numpy" in done.stderr.strip().splitlines()[-1]


def test_asking_for_mkl_without_the_wheel_names_the_fix(monkeypatch):
    monkeypatch.setattr(gemm_provider, "_library_path", lambda: None)
    with pytest.raises(gemm_provider.GemmUnavailable, match=r"pip install 'minflux\[mkl\]'"):
        gemm_provider._load("mkl")
    assert gemm_provider._load("auto") == (None, "numpy")


@needs_mkl
def test_a_leading_dimension_past_32_bits_is_left_to_numpy():
    one = np.ones((1, 1), np.float32)
    assert gemm(one, one, np.zeros((1, 1), np.float32))
    far = np.lib.stride_tricks.as_strided(one, shape=(1, 1), strides=(4 * 2**31, 4))   # one row, 2^31 apart
    assert gemm(one, far, np.zeros((1, 1), np.float32)) is False
