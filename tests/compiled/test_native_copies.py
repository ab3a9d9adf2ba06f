"""Copies in a native replay: ``np.positive`` of a float array is a copy of its bytes, and so are the
copy a gradient gets when it would otherwise alias another array, and ``np.stack``.

A float's unary plus changes no bit (NaN payloads and signed zeros included), so the runner copies
rows of bytes; each test runs 72 calls against the eager function, bit for bit, and checks that the
copy ran natively.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.schedule import native
from tests.compiled.test_models_compiled import CALLS, bits
from tests.compiled.test_native_replay import compile_after_five_replays, native_form  # noqa: F401


def python_calls_of(form, fn) -> int:
    return sum(native._callee(st) is fn for st in form.statements)


def odd_values(rng, shape, dtype):
    """Normal values with NaNs of other payloads, infinities and negative zeros among them."""
    x = rng.normal(size=shape).astype(dtype)
    flat = x.reshape(-1)
    payload = np.array([0x7FC00123, 0x7F800001], np.uint32) if dtype == np.float32 else \
        np.array([0x7FF8000000000123, 0x7FF0000000000001], np.uint64)
    flat[:2] = payload.view(dtype)
    flat[2:5] = [-0.0, np.inf, -np.inf]
    rng.shuffle(flat)
    return x


def copied_twice(x, rows):
    y = np.multiply(x, 1.0)
    return np.multiply(np.positive(y), 1.0), np.multiply(np.positive(rows(y)), 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [lambda y: y[:, 1], lambda y: y[::2, 1]], ids=["rows of a slice", "strided rows"])
def test_positive_copies_bytes_natively_and_equals_eager_for_72_calls(dtype, rows):
    rng = np.random.default_rng(31)
    fn = lambda x: copied_twice(x, rows)   # noqa: E731
    step = mf.compile(fn)
    with np.errstate(invalid="ignore"):
        for k in range(CALLS):
            x = odd_values(rng, (6, 4, 5), dtype)
            assert [bits(a) for a in step(x)] == [bits(a) for a in fn(x)], f"call {k}"
    assert python_calls_of(native_form(step), np.positive) == 0


def bias_gradient(w, b, x):
    return mf.sum(mf.tanh(x @ w + b))


def test_a_gradient_that_would_alias_is_copied_natively_and_equals_eager_for_72_calls():
    rng = np.random.default_rng(32)
    w, b = rng.normal(size=(5, 3)).astype(np.float32), rng.normal(size=(1, 3)).astype(np.float32)
    fn = lambda x: mf.gradient(bias_gradient, w, b, x)[1]   # noqa: E731 (a sum over rows, reshaped: a view)
    step = mf.compile(fn)
    for k in range(CALLS):
        x = rng.normal(size=(8, 5)).astype(np.float32)
        assert bits(step(x)) == bits(fn(x)), f"call {k}"
    assert python_calls_of(native_form(step), np.positive) == 0


def stacked(x, axis):
    parts = [np.multiply(x, float(k)) for k in range(1, 4)]
    kept = np.multiply(np.stack(parts, axis=axis), 1.0)    # into a buffer the replay plans
    return kept, np.stack(parts[::-1], axis=axis)           # into a new array on every call


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_stacks_copy_rows_natively_and_equal_eager_for_72_calls(axis):
    rng = np.random.default_rng(33)
    fn = lambda x: stacked(x, axis)   # noqa: E731
    step = mf.compile(fn)
    kept = []
    for _ in range(CALLS):
        x = rng.normal(size=(4, 5)).astype(np.float32)
        kept.append((step(x), fn(x)))
    for k, (got, want) in enumerate(kept):
        assert [bits(a) for a in got] == [bits(a) for a in want], f"call {k}"
    assert python_calls_of(native_form(step), np.stack) == 0
