"""ufuncs in a native replay as numpy's own loops: ``np.tanh``, ``np.exp``, ``np.power``... run by the
native runner with numpy's bits and numpy's floating-point checks. Each test runs 72 calls against the
eager function, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from tests.compiled.test_models_compiled import CALLS, bits
from tests.compiled.test_native_copies import odd_values, python_calls_of
from tests.compiled.test_native_replay import compile_after_five_replays, native_form, with_warnings  # noqa: F401

LOOPED = (np.tanh, np.exp, np.log, np.power, np.maximum, np.arctan2, np.greater, np.sqrt)


def elementwise(x, y):
    a = np.tanh(np.multiply(x, 1.0))
    b = np.exp(np.log(np.maximum(a, y)))          # into planned buffers, NaNs and zeros of both signs
    c = np.arctan2(np.power(b, 2), np.power(x, np.float32(0.5) if x.dtype == np.float32 else 0.5))
    np.sqrt(c, out=c)                              # in place, into the array the step returns
    return a, c, np.greater(c, 0.25)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ufuncs_run_as_numpys_loops_and_equal_eager_for_72_calls(dtype):
    rng = np.random.default_rng(81)
    step = mf.compile(elementwise)
    with np.errstate(all="ignore"):
        for k in range(CALLS):
            x, y = odd_values(rng, (6, 5), dtype), odd_values(rng, (6, 5), dtype)
            assert [bits(a) for a in step(x, y)] == [bits(a) for a in elementwise(x, y)], f"call {k}"
    form = native_form(step)
    assert {fn.__name__: python_calls_of(form, fn) for fn in LOOPED} == {fn.__name__: 0 for fn in LOOPED}


def exponent(x):
    return np.exp(np.multiply(x, 1.0))


@pytest.mark.parametrize("mode", ["raise", "warn"])
def test_a_loop_whose_check_fails_is_done_again_by_numpy_which_raises_or_warns(mode):
    """Overflow in ``exp`` on some calls: the runner stops there and numpy's call raises, or warns and
    gives its values, as the eager function does on the same call."""
    rng = np.random.default_rng(82)
    step = mf.compile(exponent)
    with np.errstate(over=mode):
        for k in range(CALLS):
            x = rng.normal(size=(3, 4)).astype(np.float32) * (200.0 if k % 9 == 8 else 1.0)
            overflows = bool(np.any(x > 88.7))
            if mode == "raise" and overflows:
                with pytest.raises(FloatingPointError):
                    exponent(x)
                with pytest.raises(FloatingPointError):
                    step(x)
                continue
            (want, eager_warnings), (got, compiled_warnings) = with_warnings(exponent, x), with_warnings(step, x)
            assert bits(got) == bits(want), f"call {k}"
            assert compiled_warnings == eager_warnings, f"call {k}"
    assert python_calls_of(native_form(step), np.exp) == 0


def broadcast_row(x, row):
    return np.maximum(np.multiply(x, 1.0), row)


def test_a_call_numpy_iterates_otherwise_stays_python_and_equals_eager():
    rng = np.random.default_rng(83)
    step = mf.compile(broadcast_row)
    for k in range(CALLS):
        x, row = rng.normal(size=(4, 6)), rng.normal(size=6)
        assert bits(step(x, row)) == bits(broadcast_row(x, row)), f"call {k}"
    assert python_calls_of(native_form(step), np.maximum) == 1


def square_product(x, w):
    return np.tanh(np.matmul(np.multiply(x, 1.0), w))


def test_a_generalized_ufunc_of_arrays_shaped_like_its_result_stays_python_and_equals_eager():
    """``np.matmul`` of square matrices: a ufunc of two inputs of the output's shape, whose loop is no
    elementwise loop (it reads core dimensions a call of ``count`` elements does not give it)."""
    rng = np.random.default_rng(85)
    step = mf.compile(square_product)
    for k in range(CALLS):
        x, w = rng.normal(size=(7, 7)), rng.normal(size=(7, 7))
        (want, eager_warnings), (got, compiled_warnings) = with_warnings(square_product, x, w), with_warnings(step, x, w)
        assert (bits(got), compiled_warnings) == (bits(want), eager_warnings), f"call {k}"
    assert python_calls_of(native_form(step), np.matmul) == 1 and python_calls_of(native_form(step), np.tanh) == 0


def squared_error_gradients(x, y):
    return mf.gradient(lambda x: mf.sum((x - y) ** 2) + mf.sum(x ** 0.5) + mf.sum(x ** 0), x)[0]


def test_a_constant_exponents_gradient_runs_natively_and_equals_eager_for_72_calls():
    """``x ** 2``'s partial ``2 x`` needs no ``where`` over the elements for a constant exponent (the
    ``x ** 0`` term keeps its zeros, signs included); every call bit for bit with the eager one."""
    rng = np.random.default_rng(84)
    step = mf.compile(squared_error_gradients)
    with np.errstate(all="ignore"):
        for k in range(CALLS):
            x, y = odd_values(rng, (5, 4), np.float32), odd_values(rng, (5, 4), np.float32)
            x[0, :2] = [0.0, -0.0]
            assert bits(step(x, y)) == bits(squared_error_gradients(x, y)), f"call {k}"
    form = native_form(step)
    assert (python_calls_of(form, np.where), python_calls_of(form, np.power)) == (1, 0)   # x ** 0's where


def misaligned_like(x):
    """A copy of ``x`` at an address no multiple of its item size, as a view into bytes can be."""
    raw = np.zeros(x.nbytes + x.itemsize, np.uint8)
    y = np.ndarray(x.shape, x.dtype, buffer=raw, offset=1)
    y[...] = x
    return y


def test_an_input_not_aligned_runs_the_python_form_and_equals_eager():
    """numpy hands its loops aligned data only (it copies otherwise); a call whose input lies at an
    address numpy would not hand a loop is laid out otherwise than the probe's, and runs in Python."""
    rng = np.random.default_rng(83)
    step = mf.compile(elementwise)
    with np.errstate(all="ignore"):
        for k in range(CALLS):
            x, y = rng.normal(size=(2, 64)).astype(np.float64)
            if k >= CALLS - 4:
                x, y = misaligned_like(x), misaligned_like(y)
                assert not native_form(step).patch([x, y])
            assert [bits(v) for v in step(x, y)] == [bits(v) for v in elementwise(x, y)], f"call {k}"
    assert step.recordings == 1


def updated_in_place(x, y):
    np.add(x, y, out=x)
    x *= 2.0
    return np.tanh(x)


def test_an_input_read_only_where_it_was_writeable_raises_as_eagerly_and_stays_unwritten():
    rng = np.random.default_rng(84)
    step = mf.compile(updated_in_place)
    for k in range(CALLS):
        x, y = rng.normal(size=(2, 16))
        twin = x.copy()
        if k >= CALLS - 4:
            x.setflags(write=False)
            twin.setflags(write=False)
            with pytest.raises(ValueError, match="read-only"):
                updated_in_place(twin, y)
            with pytest.raises(ValueError, match="read-only"):
                step(x, y)
        else:
            assert bits(step(x, y)) == bits(updated_in_place(twin, y)), f"call {k}"
        assert bits(x) == bits(twin), f"call {k}"
    assert step.recordings == 1 and native_form(step) is not None
