"""The row-masked product in a native replay: one command that looks at the data and steps aside.

`mf.row_masked_matmul` leaves the masked rows out of its product only where the mask drops enough of
them, a fact of each call's data. Its forward pass is one native command that counts the dropped rows
and stops where they are enough (the Python call then leaves them out), else runs the product and
zeroes the masked rows' leading columns; its backward pass copies the gradient and zeroes the same.
Every test runs 72 calls against the eager function, bit for bit, with as many dropped rows as every
path needs.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minflux as mf
from minflux.ops import row_masking
from tests.compiled.test_models_compiled import CALLS, bits
from tests.compiled.test_native_copies import python_calls_of
from tests.compiled.test_native_replay import compile_after_five_replays, native_form, numpys_product  # noqa: F401

COLUMNS = 40


def loss_and_gradients(x, w, keep):
    return mf.withgradient(lambda x, w: mf.sum(mf.tanh(mf.row_masked_matmul(x, w, keep, COLUMNS))), x, w)


def flattened(result) -> list:
    loss, grads = result
    return [bits(loss), *(bits(g) for g in grads)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_row_masked_product_runs_natively_and_steps_aside_where_rows_are_left_out(dtype, monkeypatch):
    monkeypatch.setattr(row_masking, "SKIP_MIN_WORK", 2**12)   # leaving 8 of 16 rows out: enough here
    rng = np.random.default_rng(61)
    w = rng.normal(size=(24, 48)).astype(dtype)
    step = mf.compile(loss_and_gradients)
    for k in range(CALLS):
        x = rng.normal(size=(16, 24)).astype(dtype)
        dropped = (0, 1, 3, 4, 5, 7, 8, 12, 16)[k % 9] if k > 10 else k % 3   # 5 and more: left out
        keep = np.ones(16, bool)
        keep[rng.permutation(16)[:dropped]] = False
        assert flattened(step(x, w, keep)) == flattened(loss_and_gradients(x, w, keep)), f"call {k}"
    form = native_form(step)
    forward, masked = row_masking._forward.__wrapped_operation__, row_masking._masked.__wrapped_operation__
    assert python_calls_of(form, forward) == python_calls_of(form, masked) == 0


@pytest.mark.parametrize("when", ["raise", "warn"])
def test_an_overflowing_row_masked_product_raises_or_warns_as_numpy_does(when, numpys_product):
    rng = np.random.default_rng(62)
    w = rng.normal(size=(6, 48)).astype(np.float32)
    step = mf.compile(loss_and_gradients)
    with np.errstate(over=when):
        for k in range(CALLS):
            x = rng.normal(size=(5, 6)).astype(np.float32) * (np.float32(1e30) if k > 20 and k % 5 == 0 else 1)
            keep = rng.random(5) < 0.7
            outcomes = []
            for fn in (step, loss_and_gradients):
                with warnings.catch_warnings(record=True) as seen:
                    warnings.simplefilter("always")
                    try:
                        outcomes.append((flattened(fn(x, w, keep)), [str(s.message) for s in seen]))
                    except FloatingPointError as error:
                        outcomes.append((str(error), []))
            assert outcomes[0] == outcomes[1], f"call {k}"
    assert python_calls_of(native_form(step), row_masking._forward.__wrapped_operation__) == 0
