"""Comparisons and logical operations in a native replay: booleans as numpy makes them.

``np.not_equal`` and ``np.equal`` of float32 or float64 arrays (or a Python number in their dtype)
and ``np.logical_or`` and ``np.logical_and`` of booleans run as native commands into boolean
buffers, with numpy's answers at NaNs, signed zeros and infinities, and numpy's floating-point
checks. Each test runs 72 calls against the eager function, bit for bit.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from tests.compiled.test_models_compiled import CALLS, bits
from tests.compiled.test_native_copies import odd_values, python_calls_of
from tests.compiled.test_native_replay import compile_after_five_replays, native_form  # noqa: F401


def masks(x, y):
    a, b = np.multiply(x, 1.0), np.multiply(y, 1.0)
    either = np.logical_or(np.not_equal(a, 0), np.equal(a, b[:1]))   # a row of b broadcast
    both = np.logical_and(either, np.not_equal(b, 0.5))
    return np.multiply(either, 2.0), np.multiply(both, 3.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_comparisons_and_logical_operations_run_natively_and_equal_eager_for_72_calls(dtype):
    rng = np.random.default_rng(71)
    step = mf.compile(masks)
    with np.errstate(invalid="ignore"):   # a signalling NaN raises the flag, in numpy as in the runner
        for k in range(CALLS):
            x = odd_values(rng, (6, 5), dtype)
            x[rng.random((6, 5)) < 0.3] = 0.0
            y = np.where(rng.random((6, 5)) < 0.5, x, odd_values(rng, (6, 5), dtype))
            assert [bits(a) for a in step(x, y)] == [bits(a) for a in masks(x, y)], f"call {k}"
    form = native_form(step)
    for fn in (np.not_equal, np.equal, np.logical_or, np.logical_and):
        assert python_calls_of(form, fn) == 0, fn


def nonzero_twice(x):
    return np.multiply(np.not_equal(x, 0), 2.0)


def test_a_comparison_whose_check_fails_is_done_again_by_numpy_with_numpys_answer():
    """A signalling NaN raises the invalid flag in the runner's comparison; numpy's comparison loop does
    not act on it, so under ``invalid="raise"`` the runner stops and numpy's call gives its booleans."""
    rng = np.random.default_rng(72)
    step = mf.compile(nonzero_twice)
    with np.errstate(invalid="raise"):
        for k in range(CALLS):
            x = odd_values(rng, (4, 7), np.float32) if k > 12 else rng.normal(size=(4, 7)).astype(np.float32)
            assert bits(step(x)) == bits(nonzero_twice(x)), f"call {k}"
    assert python_calls_of(native_form(step), np.not_equal) == 0
