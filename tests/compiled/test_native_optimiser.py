"""An optimiser's bookkeeping in a native replay: step counts, bias corrections, updates in place.

Adam's update of one parameter is a step count raised by one (integer arithmetic, which wraps as
numpy's does), its bias corrections ``1 - beta^t`` (the C library's ``pow``, as Python's ``**``), the
kernel of its moments and the parameter's update in place. All of it runs natively, with the eager
step's bits; where Python would raise computing the corrections, the replay raises as it does.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux import optim
from minflux.optim import adaptive
from tests.compiled.test_models_compiled import CALLS, bits, trained_to_eagers_bits
from tests.compiled.test_native_copies import python_calls_of
from tests.compiled.test_native_replay import compile_after_five_replays, native_form  # noqa: F401


def counted(t, step, rule, dtype):
    t += step        # in place: a 0-d array stays one
    doubled = np.multiply(t.reshape(1), 2)   # an array (of a 0-d one, a ufunc gives a scalar)
    return doubled, *rule.corrections(t, dtype)


STARTS = [0, 1, 2, 7, 100, 6999, 10**6, 2**40, 2**62, np.iinfo(np.int64).max]   # the last wraps around


def same_or_same_error(step, t, *args) -> None:
    """``step(t, *args)`` against `counted` on a copy of ``t``: the same bits, or the same error."""
    twin = t.copy()
    try:
        want = counted(twin, *args)
    except (OverflowError, ZeroDivisionError) as error:
        with pytest.raises(type(error)):
            step(t, *args)
        return
    got = step(t, *args)
    assert [bits(a) for a in (t, *got)] == [bits(a) for a in (twin, *want)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("betas", [(0.9, 0.999), (0.5, 0.0), (0.999999999, 1e-300)], ids=str)
def test_step_counts_and_bias_corrections_run_natively_with_pythons_bits_for_72_calls(dtype, betas):
    rule = optim.Adam(beta1=betas[0], beta2=betas[1])
    step = mf.compile(counted)
    rng = np.random.default_rng(41)
    for k in range(CALLS):
        start = STARTS[k % len(STARTS)] if k % 3 else int(rng.integers(0, 2**31))
        same_or_same_error(step, np.array(start), 1, rule, dtype)   # the count wrapped: 0.9 ** -2**63 overflows
    form = native_form(step)
    assert python_calls_of(form, np.add) == python_calls_of(form, np.multiply) == 0
    assert python_calls_of(form, adaptive._bias_corrections.__wrapped_operation__) == 0


@pytest.mark.parametrize("betas", [(0.5, 0.0), (0.5, 0.25)], ids=["0 ** -n divides by zero", "nothing to raise"])
def test_a_negative_step_count_is_corrected_as_python_does_or_raises_as_it_does(betas):
    rule = optim.Adam(beta1=betas[0], beta2=betas[1])
    step = mf.compile(counted)
    for k in range(CALLS):
        same_or_same_error(step, np.array(-7 if k > 20 and k % 4 == 0 else k), 1, rule, np.float32)
    assert python_calls_of(native_form(step), adaptive._bias_corrections.__wrapped_operation__) == 0


def test_adams_whole_update_runs_natively_and_training_equals_eager_to_the_bit():
    form = native_form(trained_to_eagers_bits("dense-chain", seed=9))
    if mf.get_elementwise_backend() == "numba":
        for fn in (np.subtract, adaptive._bias_corrections.__wrapped_operation__):   # updates, corrections
            assert python_calls_of(form, fn) == 0, fn
