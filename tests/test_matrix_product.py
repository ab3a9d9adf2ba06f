"""The matrix product provider: large products split over the pool agree with one BLAS call."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux import matrix_product
from minflux.runtime import settings
from minflux.testing import assert_product_close


@pytest.fixture
def split_everything(monkeypatch):
    monkeypatch.setattr(matrix_product, "PARALLEL_MIN_MULTIPLY_ADDS", 0)
    monkeypatch.setitem(settings._values, "num_threads", 3)
    monkeypatch.setattr(matrix_product, "threads_now", lambda: 3)   # as if three cores were idle


CASES = [  # (m, k, n): columns split, rows split, ragged last block, fewer blocks than threads
    (32, 384, 512), (700, 64, 130), (65, 33, 200), (3, 7, 100), (200, 5, 3),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("m, k, n", CASES)
def test_split_products_equal_float64_within_rounding(split_everything, m, k, n, dtype):
    rng = np.random.default_rng(m * n + k)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    got = matrix_product.matmul(a, b)
    assert got.dtype == dtype and got.shape == (m, n)
    bound = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(got - exact) <= 4 * k * np.finfo(dtype).eps * bound)


def test_transposed_and_strided_operands(split_everything):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((300, 90)).T          # Fortran-ordered (90, 300)
    b = rng.standard_normal((300, 400))[:, ::2]   # every other column: no unit stride between rows
    assert_product_close(matrix_product.matmul(a, b), np.asarray(a) @ np.asarray(b), a, b)


def test_the_tape_uses_the_provider_forward_and_backward(split_everything):
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((70, 40)), rng.standard_normal((40, 150))
    gx, gw = mf.gradient(lambda x, w: mf.sum(mf.tanh(x @ w)), x, w)
    d = 1 - np.tanh(x @ w) ** 2
    # d is computed here and in the kernel from products summed in different orders: z = x @ w is off by
    # up to gamma_k |x| @ |w| each, and d(1 - tanh^2 z) / (1 - tanh^2 z) = -2 tanh(z) dz, plus a few ulps.
    eps = np.finfo(np.float64).eps
    operand_rtol = 2 * (40 * eps) * float(np.max(np.abs(x) @ np.abs(w))) + 8 * eps
    assert_product_close(gx, d @ w.T, d, w.T, operand_rtol=operand_rtol)
    assert_product_close(gw, x.T @ d, x.T, d, operand_rtol=operand_rtol)


def test_batched_and_vector_products_keep_numpys_rules(split_everything):
    rng = np.random.default_rng(3)
    a, b, v = rng.standard_normal((4, 5, 6)), rng.standard_normal((6, 7)), rng.standard_normal(6)
    assert_product_close(matrix_product.matmul(a, b), a @ b, a, b)
    assert_product_close(matrix_product.matmul(b.T, v), b.T @ v, b.T, v)


@pytest.mark.parametrize("m, k, n", [(32, 256, 513), (64, 700, 520), (520, 300, 64)])
def test_a_split_products_bits_depend_on_the_budget_never_on_the_load(split_everything, monkeypatch, m, k, n):
    rng = np.random.default_rng(m + k + n)
    a, b = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    results = []
    for free in (1, 2, 3):
        monkeypatch.setattr(matrix_product, "threads_now", lambda free=free: free)
        results.append(matrix_product.matmul(a, b))
    for got in results[1:]:
        np.testing.assert_array_equal(got, results[0])


@pytest.mark.parametrize("rows", ["contiguous", "time-major view", "empty"])
def test_rows_times_one_matrix_is_one_product_over_all_rows(split_everything, monkeypatch, rows):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((6, 5, 33)).astype(np.float32)
    if rows == "time-major view":
        a = a.transpose(1, 0, 2)                  # (5, 6, 33) whose leading axes do not merge
    elif rows == "empty":
        a = a[:, :0]
    b = rng.standard_normal((33, 70)).astype(np.float32)
    products = []
    real = matrix_product._matmul_2d
    monkeypatch.setattr(matrix_product, "_matmul_2d", lambda x, y, out=None: (products.append(x.shape), real(x, y, out))[1])
    got = matrix_product.matmul(a, b)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert got.shape == exact.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, exact, rtol=1e-5, atol=1e-5)
    assert products == ([] if rows == "empty" else [(30, 33)])


@pytest.mark.parametrize("a_shape", [(6, 5), (3, 2, 5)])
def test_a_product_written_into_a_given_array_has_the_bits_of_a_new_one(a_shape):
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=a_shape), rng.normal(size=(5, 7))
    out = np.full(a_shape[:-1] + (7,), np.nan)
    got = matrix_product.matmul(a, b, out)
    assert np.shares_memory(got, out) and out.tobytes() == matrix_product.matmul(a, b).tobytes()
    assert_product_close(out, a @ b, a, b)


@pytest.mark.parametrize("m, k, n", [(16, 16, 16), (64, 64, 127), (32, 384, 512), (64, 1536, 300)])
@pytest.mark.parametrize("layout", ["rows", "columns"])
def test_each_product_goes_to_the_library_its_calibration_chose(monkeypatch, m, k, n, layout):
    from minflux.runtime import gemm_choice

    monkeypatch.setattr(gemm_choice.gemm_provider, "choice", "auto")
    monkeypatch.setattr(gemm_choice.gemm_provider, "provider", "mkl")
    monkeypatch.setattr(gemm_choice, "_decisions", {})
    monkeypatch.setattr(matrix_product, "PARALLEL_MIN_MULTIPLY_ADDS", 1 << 62)   # one call per product, never cut
    winner = "mkl" if m * k * n >= 2**20 else "numpy"
    rows = [{"shape": [m, k, n, False, layout == "columns"],
             "seconds": {"numpy": 2.0 if winner == "mkl" else 1.0, "mkl": 1.0 if winner == "mkl" else 2.0}}]
    monkeypatch.setattr(gemm_choice, "table", lambda dtype: rows)
    calls = []
    monkeypatch.setattr(gemm_choice.gemm_provider, "gemm", lambda a, b, out: calls.append(a.shape) or False)
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = (rng.standard_normal((n, k)).astype(np.float32).T if layout == "columns"
         else rng.standard_normal((k, n)).astype(np.float32))
    for out in (None, np.empty((m, n), np.float32)):
        got = matrix_product.matmul(a, b, out)
        assert got.tobytes() == np.matmul(a, b).tobytes()   # numpy's bits (the stand-in gemm declines)
    assert calls == ([] if winner == "numpy" else [(m, k)] * 2)


@pytest.mark.parametrize("when", ["raise", "warn"])
def test_a_product_split_over_threads_raises_or_warns_under_the_callers_error_state(when, monkeypatch):
    """numpy's error state is the calling thread's: the share a pool worker multiplies checks its
    overflow under it too, as the whole product would."""
    from minflux.runtime import gemm_provider

    gemm_provider.gemm   # noqa: B018 (loads the provider, then every product goes to numpy)
    monkeypatch.setattr(gemm_provider, "gemm", None)
    monkeypatch.setattr(matrix_product, "PARALLEL_MIN_MULTIPLY_ADDS", 1)
    monkeypatch.setattr(matrix_product, "get_num_threads", lambda: 2)
    monkeypatch.setattr(matrix_product, "threads_now", lambda: 2)
    a, b = np.full((4, 8), 1e30, np.float32), np.ones((8, 256), np.float32)
    b[:, 128:] = 1e30                     # overflows in the second share only
    with np.errstate(over=when):
        if when == "raise":
            with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
                matrix_product.matmul(a, b)
        else:
            with pytest.warns(RuntimeWarning, match="overflow encountered in matmul"):
                out = matrix_product.matmul(a, b)
            assert np.isinf(out[:, 128:]).all() and np.isfinite(out[:, :128]).all()
