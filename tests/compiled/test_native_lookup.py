"""An embedding lookup (``np.take`` along axis 0) writes into a buffer the replay plans, so the
products that read it run natively, with the eager step's bits for 72 calls; a bad index still raises."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from tests.compiled.test_models_compiled import CALLS, bits
from tests.compiled.test_native_replay import compile_after_five_replays, native_form  # noqa: F401


def looked_up_loss(table, w, ids):
    x = mf.reshape(mf.take(table, ids, axis=0), (-1, table.shape[1]))
    return mf.sum(mf.tanh(x @ w))


def lookup_gradients(table, w, ids):
    """The table's and the weight's gradients, passed on to another operation (a step's own results
    are new arrays on every call)."""
    return [g * 1.0 for g in mf.gradient(looked_up_loss, table, w, ids)[:2]]


def test_products_of_a_lookup_run_natively_and_equal_eager_for_72_calls():
    rng = np.random.default_rng(41)
    table, w = rng.normal(size=(11, 6)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32)
    step = mf.compile(lookup_gradients)
    for k in range(CALLS):
        ids = rng.integers(0, 11, size=(4, 7))   # ids picked twice add up in the table's gradient
        assert [bits(g) for g in step(table, w, ids)] == [bits(g) for g in lookup_gradients(table, w, ids)], \
            f"call {k}"
    assert native_form(step).n_products == 3   # x @ w and both gradients: only x @ w where the lookup's array is new
    with pytest.raises(IndexError):
        step(table, w, np.full((4, 7), 11))
    ids = rng.integers(0, 11, size=(4, 7))
    assert [bits(g) for g in step(table, w, ids)] == [bits(g) for g in lookup_gradients(table, w, ids)]
