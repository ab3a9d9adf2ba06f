"""A product large enough for `minflux.matrix_product` to cut into shares runs natively as those shares:
one BLAS call per share of its columns (or rows), at once on the threads free, with the bits of the
Python call that cuts it the same way, call after call.

The products here are small, so each test lowers the size from which products are cut to one
multiply-add, gives the thread budget two threads and has the free-core rule report two cores, so
that the shares form and run on the pool whatever the size and load of the machine running the tests.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minflux as mf
from minflux import matrix_product
from tests.compiled.test_models_compiled import CALLS, bits, trained_to_eagers_bits
from tests.compiled.test_native_copies import python_calls_of
from tests.compiled.test_native_replay import compile_after_five_replays, native_form, numpys_product  # noqa: F401
from tests.compiled.test_native_replay import with_warnings


@pytest.fixture(params=[2, 1], ids=["two cores free", "one core free"])
def cut_in_two(request, monkeypatch):
    monkeypatch.setattr(matrix_product, "PARALLEL_MIN_MULTIPLY_ADDS", 1)
    monkeypatch.setattr(matrix_product, "get_num_threads", lambda: 2)
    for where in ("minflux.schedule.native_steps", "minflux.matrix_product"):
        monkeypatch.setattr(f"{where}.threads_now", lambda: request.param)
    monkeypatch.setattr("minflux.schedule.native.usable_cores", lambda: 2)
    return request.param


def two_products(x, w, v):
    """A product cut by columns (``8 x 130``), one cut by rows (``130 x 6``), and arithmetic on each."""
    wide = np.add(matrix_product.matmul(x, w), 1.0)
    tall = np.multiply(matrix_product.matmul(v, x[:, :6]), 0.5)
    return wide, tall


def inputs(rng, dtype, scale=1.0):
    return [(scale * rng.normal(size=shape)).astype(dtype) for shape in [(8, 16), (16, 130), (130, 8)]]


def share_steps(form) -> list:
    """The number of commands run at once in each grouped step of ``form``'s segments."""
    return [len(step) for st in form.statements if st.params and st.params[0] == form.in_groups
            for step in st.params[1] if step[0].__class__ is tuple]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_cut_into_shares_run_natively_with_eagers_bits_for_72_calls(dtype, cut_in_two):
    rng = np.random.default_rng(21)
    step = mf.compile(two_products)
    for k in range(CALLS):
        args = inputs(rng, dtype)
        assert [bits(a) for a in step(*args)] == [bits(a) for a in two_products(*args)], f"call {k}"
    form = native_form(step)
    assert form.n_products == 2 and python_calls_of(form, matrix_product.matmul) == 0
    assert share_steps(form) == [2, 2]   # each product's two shares, at once where two cores are free


def test_a_product_cut_into_shares_is_the_command_of_each_share():
    rng = np.random.default_rng(22)
    x, w = rng.normal(size=(4, 3)), rng.normal(size=(3, 200))
    out = np.empty((4, 200))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(matrix_product, "PARALLEL_MIN_MULTIPLY_ADDS", 1)
        patch.setattr(matrix_product, "get_num_threads", lambda: 2)
        command = matrix_product.native_command(x, w, out, np.geterr())
    if command is None:
        pytest.skip("no BLAS routine the runner can call here")
    words = np.asarray(command.words).reshape(2, -1)
    assert command.shares == 2 and command.stops == (0, words.shape[1])
    assert words[:, 4:7].tolist() == [[4, 128, 3], [4, 72, 3]]   # m, n, k: two of the four 64-column blocks each
    assert words[1, 9] - words[0, 9] == words[1, 11] - words[0, 11] == 128 * 8   # both from column 128


@pytest.mark.parametrize("when", ["raise", "warn"])
def test_a_share_that_overflows_raises_or_warns_as_the_python_call_does(when, cut_in_two, numpys_product):
    rng = np.random.default_rng(23)
    step = mf.compile(two_products)
    with np.errstate(over=when):
        for _ in range(10):
            args = inputs(rng, np.float32)
            assert [bits(a) for a in step(*args)] == [bits(a) for a in two_products(*args)]
        assert share_steps(native_form(step)) == [2, 2]
        huge = inputs(rng, np.float32)
        huge[0][:], huge[1][:, 100:] = 1e30, 1e30   # overflows in the wide product's second share only
        if when == "raise":
            with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
                two_products(*huge)
            with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
                step(*huge)
        else:
            (want, eager_warnings), (got, compiled_warnings) = with_warnings(two_products, *huge), \
                with_warnings(step, *huge)
            assert [bits(a) for a in got] == [bits(a) for a in want]
            assert compiled_warnings == eager_warnings and len(eager_warnings) == 1
        args = inputs(rng, np.float32)   # and the next call runs the shares again, silent
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert [bits(a) for a in step(*args)] == [bits(a) for a in two_products(*args)]
    assert step.recordings == 1


def test_training_with_products_cut_into_shares_equals_eager_to_the_bit_for_72_steps(cut_in_two, monkeypatch):
    monkeypatch.setattr(matrix_product, "_BLOCK", 4)   # the model's products are narrow: blocks of 4 columns
    form = native_form(trained_to_eagers_bits("hmlstm-branch-ln", seed=9))
    assert form.n_products > 0 and 2 in share_steps(form)


def one_block_and_a_column(x, w):
    """A product of 65 columns, cut in two by whole blocks of 64: the second share is a single column
    (as an LSTM's four gates and a boundary of 16 units each are)."""
    return np.add(matrix_product.matmul(x, w), 1.0)


def test_a_share_of_one_column_stays_the_python_call_with_eagers_bits_for_72_calls(cut_in_two, numpys_product):
    """numpy multiplies a single column by gemv, whose sums round otherwise than a gemm of one column:
    such a product is left to its Python call, which cuts it the same way eagerly and replayed."""
    rng = np.random.default_rng(5)

    def operands():
        return rng.normal(size=(8, 64)).astype(np.float32), rng.normal(size=(64, 65)).astype(np.float32)

    x, w = operands()
    assert matrix_product.native_command(x, w, np.empty((8, 65), np.float32), np.geterr()) is None
    step = mf.compile(one_block_and_a_column)
    for k in range(CALLS):
        x, w = operands()
        assert bits(step(x, w)) == bits(one_block_and_a_column(x, w)), f"call {k}"
    form = native_form(step)
    assert form is not None and form.n_products == 0   # the product stayed its Python call
