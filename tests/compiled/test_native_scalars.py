"""Numpy scalars in a native replay: a sum or a mean of every element (a loss) made natively into a
0-d array and bound as its numpy scalar, the commands that read that scalar reading it where it lies,
and numpy's error state left unset where only commands would read it. Each test runs 72 calls
against the eager function, bit for bit and type for type."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from tests.compiled.test_models_compiled import CALLS, bits
from tests.compiled.test_native_copies import python_calls_of
from tests.compiled.test_native_replay import compile_after_five_replays, native_form, with_warnings  # noqa: F401


def losses(x):
    y = np.multiply(x, 1.5)
    total = np.sum(y)                   # a numpy scalar, new on every call
    return total, np.mean(y), total / 7, np.multiply(y, total), np.ones_like(total)


def kinds(values) -> list:
    return [(type(v), bits(np.asarray(v))) for v in values]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_and_means_of_every_element_are_native_numpy_scalars_equal_to_eager_for_72_calls(dtype):
    rng = np.random.default_rng(91)
    step = mf.compile(losses)
    seen = set()
    for k in range(CALLS):
        x = rng.normal(size=(6, 5)).astype(dtype)
        got, want = step(x), losses(x)
        assert kinds(got) == kinds(want), f"call {k}"
        seen.add(bits(np.asarray(got[0])))
    assert len(seen) == CALLS   # a new value on every call, none the probe's
    form = native_form(step)
    for fn in (np.sum, np.mean, np.true_divide, np.multiply, np.ones_like):
        assert python_calls_of(form, fn) == 0, fn


def mean_squared_error_gradient(x, y):
    return mf.withgradient(lambda x: mf.mean((x - y) ** 2), x)


def test_a_mean_losss_value_and_gradient_run_in_one_segment_and_equal_eager_for_72_calls():
    """The loss, the seed made from it, the mean's gradient broadcast back over the elements and the
    numpy error state set around both passes: one native segment, nothing between. (Infinities of
    both signs make NaNs; NaNs of other payloads meeting in a sum would not be numpy's, as for the
    runner's arithmetic.)"""
    rng = np.random.default_rng(92)
    step = mf.compile(mean_squared_error_gradient)
    with np.errstate(all="ignore"):
        for k in range(CALLS):
            x, y = rng.normal(size=(5, 4)).astype(np.float32), rng.normal(size=(5, 4)).astype(np.float32)
            x.flat[rng.integers(0, 20, 3)] = [-0.0, np.inf, -np.inf] if k % 3 == 2 else [-0.0, 0.0, 1.0]
            (loss, (g,)), (want, (want_g,)) = step(x, y), mean_squared_error_gradient(x, y)
            assert kinds([loss, g]) == kinds([want, want_g]), f"call {k}"
    form = native_form(step)
    assert form.n_segments == 1
    assert not any(native_callee is np.seterr for native_callee in map(_callee, form.statements))


def _callee(st):
    from minflux.schedule import native
    return native._callee(st)


def overflowing_sum_inside_errstate(x, mode):
    y = np.multiply(x, 1.0)
    with np.errstate(over=mode):       # set and reset around commands alone: the statements are left out
        total = np.sum(y)
    return total, np.multiply(y, 2.0)


@pytest.mark.parametrize("mode", ["raise", "warn"])
def test_a_command_stopped_inside_an_errstate_the_step_sets_raises_or_warns_as_eager(mode):
    """The sum overflows on some calls; its redo runs under the error state of its own call, though the
    statements that set that state around it are not run."""
    rng = np.random.default_rng(93)
    step = mf.compile(overflowing_sum_inside_errstate)
    stopped = 0
    for k in range(CALLS):
        x = (np.clip(rng.normal(size=(4, 3)), -3, 3) * (1e38 if k % 7 == 6 else 1.0)).astype(np.float32)
        try:
            want, want_warnings = with_warnings(overflowing_sum_inside_errstate, x, mode)
        except FloatingPointError:
            with pytest.raises(FloatingPointError):
                step(x, mode)
            stopped += 1
            continue
        got, got_warnings = with_warnings(step, x, mode)
        assert kinds(got) == kinds(want), f"call {k}"
        assert got_warnings == want_warnings, f"call {k}"
        stopped += bool(want_warnings)
    assert stopped >= 5
    form = native_form(step)
    assert python_calls_of(form, np.sum) == 0 and python_calls_of(form, np.seterr) == 0


def updated_in_place(x):
    total = np.sum(x)                   # a numpy scalar: `*=` rebinds it, as numpy's scalars are immutable
    total *= 1.5
    total += x[0, 0]
    total -= 0.25
    cell = np.sum(x, keepdims=True).reshape(())   # a 0-d array: `*=` writes into it
    cell *= total
    return total, cell, total ** 2


def same_kinds_as_eager(fn, make_args) -> mf.CompiledStep:
    """``fn`` compiled, called `CALLS` times (arguments ``make_args(rng)``) beside ``fn``: the same
    types and bits each time, from one recording."""
    rng, step = np.random.default_rng(93), mf.compile(fn)
    for k in range(CALLS):
        args = make_args(rng)
        assert kinds(step(*args)) == kinds(fn(*args)), f"call {k}"
    assert step.recordings == 1
    return step


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_operators_on_numpy_scalars_rebind_them_as_eagerly_for_72_calls(dtype):
    same_kinds_as_eager(updated_in_place, lambda rng: (rng.normal(size=(4, 3)).astype(dtype),))


def reading_elements(x, w):
    """Numpy scalars a Python statement makes on every call (an element of an input) read by the
    operations that could be commands: numpy's arithmetic, numpy's tanh loop, an elementwise kernel."""
    return x * x[0, 0], np.tanh(x[1, 2]) + w, np.multiply(x[0, 1], 2.0), mf.tanh(x) * x[2, 0], x[1, 1] - w


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_numpy_scalars_made_in_python_are_read_at_every_call_not_the_probes_for_72_calls(dtype):
    step = same_kinds_as_eager(reading_elements, lambda rng: (rng.normal(size=(3, 4)).astype(dtype),
                                                               rng.normal(size=4).astype(dtype)))
    assert native_form(step) is not None


def integer_scalar_arithmetic(x):
    i = x[0]                            # a numpy int64: its operators check overflow, a ufunc's wrap silently
    return i * 2 + 1, -i, 3 * i, (i > 0) + 1


@pytest.mark.parametrize("state", ["warn", "raise"])
def test_numpy_integer_scalars_overflow_as_eagerly_warning_or_raising_for_72_calls(state):
    step = mf.compile(integer_scalar_arithmetic)
    for k in range(CALLS):
        x = np.array([np.iinfo(np.int64).min if k % 3 == 2 else k + 1, 2], np.int64)
        outcomes = []
        for fn in (integer_scalar_arithmetic, step):
            with np.errstate(all=state):
                try:
                    outcomes.append(with_warnings(fn, x.copy()))
                except FloatingPointError as error:
                    outcomes.append(str(error))
        got, want = outcomes[1], outcomes[0]
        if isinstance(want, str):
            assert got == want, f"call {k}"
        else:
            assert kinds(got[0]) == kinds(want[0]) and got[1] == want[1], f"call {k}"
    assert step.recordings == 1
