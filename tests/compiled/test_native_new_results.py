"""A native command whose results are handed back writes arrays new on every call, as its Python call does.

Results that reach a step's outputs (an optimiser's new moments, say) get no planned buffer: the
caller keeps them, so the next call must not write over them. Their command is made at the probe for
the arrays that call returned, and each later call makes arrays of their layouts for it
(`minflux.schedule.native_results`). Every test keeps all the results of 72 calls and compares them
with the eager function's only at the end, so a call that wrote over an earlier call's results fails.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.runtime import native_runner
from tests.compiled.test_models_compiled import CALLS, bits, trained_to_eagers_bits
from tests.compiled.test_native_replay import AddFromACell, compile_after_five_replays, native_form  # noqa: F401


@mf.elementwise
def scaled_pair(x, s):
    return x * s, x + s


def pair_of_its_mean(x):
    y = np.multiply(x, 1.0)
    return scaled_pair(y, y.mean())


def all_calls(step, fn, make_input) -> None:
    """``step`` and ``fn`` on `CALLS` inputs, every result kept and compared at the end; no two calls'
    results share memory."""
    rng = np.random.default_rng(21)
    kept = []
    for _ in range(CALLS):
        x = make_input(rng)
        kept.append((step(x), fn(x)))
    for k, (got, want) in enumerate(kept):
        assert [bits(g) for g in got] == [bits(w) for w in want], f"call {k}"
    arrays = [g for got, _ in kept for g in got]
    assert not any(np.may_share_memory(a, b) for i, a in enumerate(arrays) for b in arrays[i + 1:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_kernel_whose_results_are_handed_back_runs_natively_into_new_arrays_each_call(dtype):
    step = mf.compile(pair_of_its_mean)
    all_calls(step, pair_of_its_mean, lambda rng: rng.normal(size=(4, 6)).astype(dtype))
    if mf.get_elementwise_backend() == "numba":
        form = native_form(step)
        assert form.n_kernels == 1 and len(form.new_results) == 2


def two_pairs(x):
    y = np.multiply(x, 1.0)
    m = y.mean()
    return (*scaled_pair(np.sort(x), m), *scaled_pair(y, m))   # the first reads a new array each call


def test_new_results_of_a_launch_that_stays_python_are_its_own_beside_a_commands():
    step = mf.compile(two_pairs)
    all_calls(step, two_pairs, lambda rng: rng.normal(size=(3, 5)))
    if mf.get_elementwise_backend() == "numba":
        form = native_form(step)
        assert form.n_kernels == 1 and len(form.new_results) == 2


class PairFromACell:
    """``[x + s, 2 x]`` into new arrays (or ``out=``): its command is `AddFromACell`'s (``s`` from a cell
    the replay writes on each call, a negative ``s`` declined, as a kernel declines a scalar of another
    type) followed by the doubling."""

    __name__ = "pair_from_a_cell"
    fills_new_results = True

    def __call__(self, x, s, out=None):
        out = out or [None, None]
        return [np.add(x, s, out=out[0]), np.multiply(x, 2.0, out=out[1])]

    def native_command(self, args, kwargs, errstate):
        (x, _), out = args, kwargs.get("out")
        if out is None or any(o is None for o in out):
            return None
        add = AddFromACell().native_command(args, {"out": out[0]}, errstate)
        two = np.array([2.0], x.dtype)
        double = native_runner.map_words(2, x.dtype, 1, x.size, (x.ctypes.data, 0, 1), (two.ctypes.data, 0, 0),
                                         (out[1].ctypes.data, 0, 1), 0, None)
        return native_runner.sequence(add, double)._replace(held=(*add.held, two), refresh=add.refresh)


pair_from_a_cell = mf.operation(PairFromACell(), results="new")


def pair_from_its_mean(x):
    y = np.multiply(x, 1.0)
    return pair_from_a_cell(y, y.mean())


def test_a_command_into_new_results_that_declines_its_cell_runs_in_python_into_this_calls_arrays():
    step = mf.compile(pair_from_its_mean)
    all_calls(step, pair_from_its_mean, lambda rng: rng.normal(size=7) + (-3.0 if rng.random() < 0.3 else 3.0))
    form = native_form(step)
    assert form.n_commands == 2 and len(form.new_results) == 2   # the copy in; the pair into new arrays


def test_adams_new_moments_are_written_natively_and_training_equals_eager_to_the_bit():
    form = native_form(trained_to_eagers_bits("dense-chain", seed=8))
    if mf.get_elementwise_backend() == "numba":
        moments = [(index, k) for index, k in form.new_results if k in (1, 2)]   # Adam's (step, m, v)
        assert len(moments) == 12   # the two new moments of each of its six parameters


def halved_while_above_one(x):
    n = 0
    while x > 1.0 and n < 4:
        x = x * 0.5
        n += 1
    return x + n


def gradient_through_a_loop(params, x):
    """A kernel with a loop runs in row chunks, a Python call: its value lands in a planned buffer and
    its partial, which becomes the returned gradient, is made new on every call and multiplied by the
    output's gradient in place."""
    return mf.withgradient(lambda p: mf.sum(mf.broadcast(halved_while_above_one, p["v"], mode="mixed")
                                            * mf.tanh(x @ p["w"])), params)


def test_a_result_a_python_launch_makes_new_is_read_where_this_call_made_it_for_72_calls():
    rng = np.random.default_rng(23)
    params = {"v": rng.normal(scale=3.0, size=(5, 5)).astype(np.float32),
              "w": rng.normal(size=(5, 5)).astype(np.float32)}
    step = mf.compile(gradient_through_a_loop)
    kept = []
    for _ in range(CALLS):
        x = rng.normal(size=(5, 5)).astype(np.float32)
        kept.append((step(params, x), gradient_through_a_loop(params, x)))
    for k, ((loss, (grads,)), (want_loss, (want,))) in enumerate(kept):
        assert bits(loss) == bits(want_loss), f"call {k}"
        assert all(bits(grads[name]) == bits(want[name]) for name in want), f"call {k}"
    assert native_form(step).n_commands > 0
