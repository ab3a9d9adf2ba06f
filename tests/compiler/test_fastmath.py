"""Accuracy of the vectorisable float32 functions against float64 numpy, in ulp of the result."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from minflux.compiler import fastmath

# function name, float64 reference, allowed ulp, domain
CASES = [
    ("exp_f32", np.exp, 2, None),
    ("expm1_f32", np.expm1, 2, None),
    ("log_f32", np.log, 2, "positive"),
    ("log1p_f32", np.log1p, 3, "above -1"),
    ("tanh_f32", np.tanh, 3, None),
    ("sigmoid_f32", lambda x: 1 / (1 + np.exp(-x)), 3, None),
    ("softplus_f32", lambda x: np.logaddexp(0, x), 4, None),
]
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-30, -1e-30, 1e-45, 88.37, 88.72, 88.73, 89.0, -87.3,
                    -103.0, -104.0, -200.0, 200.0, 3e38, -3e38, np.inf, -np.inf, np.nan], np.float32)


def _samples(domain):
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([bits[np.isfinite(bits)], np.linspace(-30, 30, 200_001, dtype=np.float32),
                        np.linspace(-1e-3, 1e-3, 2001, dtype=np.float32), SPECIAL])
    if domain == "positive":
        x = np.abs(x)
    elif domain == "above -1":
        x = x[~(x < -1)]
    return x


def _vectorised(fn):
    @njit(error_model="numpy")
    def apply(x, out):
        for k in range(x.size):
            out[k] = fn(x[k])
    return apply


@pytest.mark.parametrize("name, reference, max_ulp, domain", CASES, ids=[c[0] for c in CASES])
def test_accuracy_in_ulp(name, reference, max_ulp, domain):
    x = _samples(domain)
    got = np.empty_like(x)
    _vectorised(getattr(fastmath, name))(x, got)
    with np.errstate(all="ignore"):
        want = reference(x.astype(np.float64))
        want32 = want.astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), x[np.isnan(got) != nan][:5]
    infinite = np.isinf(want32) & ~nan
    assert np.array_equal(got[infinite], want32[infinite])
    finite = ~nan & ~infinite
    spacing = np.spacing(np.abs(want32[finite])).astype(np.float64)
    spacing = np.maximum(spacing, float(np.spacing(np.float32(0))))     # subnormal results
    ulp = np.abs(got[finite].astype(np.float64) - want[finite]) / spacing
    worst = int(np.argmax(ulp))
    assert ulp[worst] <= max_ulp, f"{name}({x[finite][worst]!r}) off by {ulp[worst]:.2f} ulp"
