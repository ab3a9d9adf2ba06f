"""A replay's native form (`minflux.schedule.native`) gives the eager function's bits, call after call.

Each test compiles after five replays, so the sixth replay plans buffers, the seventh probes for
commands and every later one runs kernels and products natively; each asserts that the native form
was reached, so none of them passes by running Python alone.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minflux as mf
from minflux import matrix_product
from minflux.runtime import gemm_provider, native_runner
from tests.compiled.test_models_compiled import CALLS, bits, build, trained_to_eagers_bits, train_step



@pytest.fixture(autouse=True)
def compile_after_five_replays(monkeypatch, replays_counted_not_timed):
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", 5)
    native_runner.load_runner()   # here, rather than on the thread a replay starts (a second or two)


def with_warnings(fn, *args) -> tuple:
    """``fn(*args)``, and the messages of the warnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [str(w.message) for w in caught]


def native_form(step):
    (entry,) = step._entries.values()
    return entry.replay.native


@pytest.fixture
def numpys_product(monkeypatch):
    """Every product through numpy's matmul (the provider's choice loaded first, then set aside)."""
    gemm_provider.gemm   # noqa: B018 (loads the provider)
    monkeypatch.setattr(gemm_provider, "gemm", None)


@pytest.mark.parametrize("case", ["dense-chain", "gated-layer",
                                  pytest.param("hmlstm-branch-ln", marks=pytest.mark.slow),
                                  pytest.param("lstm-cell", marks=pytest.mark.slow)])
def test_native_training_equals_eager_to_the_bit_for_72_steps(case, backend):
    form = native_form(trained_to_eagers_bits(case, seed=7))
    assert form is not None and form.n_commands > 0
    if case != "dense-chain":   # the chain's backward products read data its Python calls make new
        assert form.n_products > 0
        assert form.n_kernels > 0 or backend == "numpy"


def product_then_tanh(a, b):
    return mf.sum(mf.tanh(mf.matmul(a, b)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("layout", ["C", "transposed", "rows of a 3-D array"])
def test_a_native_product_of_new_arrays_each_call_equals_eager(dtype, layout, numpys_product):
    rng = np.random.default_rng(0)
    step = mf.compile(product_then_tanh)
    for k in range(CALLS):
        a = rng.normal(size=(2, 3, 5) if layout == "rows of a 3-D array" else (6, 5)).astype(dtype)
        b = rng.normal(size=(5, 7)).astype(dtype)
        if layout == "transposed":
            b = np.asfortranarray(b)
        assert bits(step(a, b)) == bits(product_then_tanh(a, b)), f"call {k}"
    form = native_form(step)
    assert (form.n_products, form.n_commands) == (1, 3)   # the product, numpy's tanh loop and the sum


@pytest.mark.parametrize("when", ["raise", "warn"])
def test_a_native_product_that_overflows_raises_or_warns_as_numpy_does(when, numpys_product):
    rng = np.random.default_rng(1)
    step = mf.compile(product_then_tanh)
    huge, also_huge = np.full((4, 4), 1e30, np.float32), np.full((4, 4), 1e30, np.float32)   # two arrays, as recorded
    with np.errstate(over=when):
        for _ in range(10):
            a, b = rng.normal(size=(4, 4)).astype(np.float32), rng.normal(size=(4, 4)).astype(np.float32)
            assert bits(step(a, b)) == bits(product_then_tanh(a, b))
        assert (native_form(step).n_products, native_form(step).n_commands) == (1, 3)   # tanh's loop, the sum
        if when == "raise":
            with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
                product_then_tanh(huge, also_huge)
            with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
                step(huge, also_huge)
        else:
            with pytest.warns(RuntimeWarning, match="overflow encountered in matmul"):
                want = product_then_tanh(huge, also_huge)
            with pytest.warns(RuntimeWarning, match="overflow encountered in matmul"):
                got = step(huge, also_huge)
            assert bits(got) == bits(want)
        a = rng.normal(size=(4, 4)).astype(np.float32)   # and the next call is native again, silent
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert bits(step(a, a.T.copy())) == bits(product_then_tanh(a, a.T.copy()))
    assert step.recordings == 1   # every call above replayed the one recording


def layer_norm_gradients(x, scale, shift, w):
    """Layer norms with and without parameters: the gradients of all three arguments, passed on to
    another operation (a step's own results are new arrays on every call)."""
    grads = mf.gradient(lambda x, s, b: mf.sum(mf.matmul(mf.layer_norm(mf.layer_norm(x, s, b) * 2.0), w)),
                        x, scale, shift)
    return [g * 1.0 for g in grads]


def test_layer_norm_row_kernels_run_natively_and_equal_eager_for_72_calls():
    from minflux.ops import layer_norm_rows

    rng = np.random.default_rng(8)
    step = mf.compile(layer_norm_gradients)
    scale, shift = rng.normal(size=7).astype(np.float32), rng.normal(size=7).astype(np.float32)
    for k in range(CALLS):
        x, w = rng.normal(size=(6, 7)).astype(np.float32), rng.normal(size=(7, 3)).astype(np.float32)
        want = layer_norm_gradients(x, scale, shift, w)
        got = step(x, scale, shift, w)
        assert [bits(g) for g in got] == [bits(g) for g in want], f"call {k}"
    words = set(native_form(step).program.tolist())
    kernels = layer_norm_rows._kernels(np.dtype(np.float32))
    if mf.get_elementwise_backend() == "numba":
        assert {native_runner.function_address(k.call) for k in kernels} <= words


@mf.elementwise
def root(x):
    return mf.sqrt(x)


def node_products(x, w):
    """Gradients through one product per node: sqrt's partial on the tape (kept by its node, so
    the product is a new array) and a kernel's partial (new, so the product overwrites it); at
    ``x = 0`` the partial is infinite, and where ``w`` is 0 too the product must be 0."""
    return mf.gradient(lambda x, w: mf.sum(mf.sqrt(x) * w + mf.broadcast(root, x) * w), x, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_node_products_run_natively_and_equal_eager_with_zeros_meeting_infinities(dtype):
    from minflux.pointwise import node, node_kernel

    rng = np.random.default_rng(9)
    step = mf.compile(node_products)
    for k in range(CALLS):
        x, w = rng.uniform(0, 2, 64).astype(dtype), rng.normal(size=64).astype(dtype)
        x[rng.integers(0, 64, 8)] = 0.0
        w[rng.integers(0, 64, 8)] = 0.0
        w[np.flatnonzero(x == 0)[:2]] = 0.0
        want = node_products(x, w)
        assert np.all(want[0][(x == 0) & (w == 0)] == 0) and np.isinf(want[0][(x == 0) & (w != 0)]).all()
        assert [bits(g) for g in step(x, w)] == [bits(g) for g in want], f"call {k}"
    if mf.get_elementwise_backend() == "numba":
        words = set(native_form(step).program.tolist())
        for in_place in (True, False):
            kernel = node_kernel._kernel(node._one_term_each(1), 1, 1, np.dtype(dtype), in_place, None)
            assert native_runner.function_address(kernel.call) in words


def gated_concatenation(z, u, x, w):
    """A gate broadcast over each row's columns, whose product is a column block of a concatenation:
    its node's gradient reads a strided view of the concatenation's gradient and a broadcast partial."""
    return mf.gradient(lambda z, u: mf.sum(mf.tanh(mf.concatenate([z * mf.tanh(u), x], axis=-1) @ w)), z, u)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_node_gradient_of_strided_and_broadcast_arrays_runs_natively_and_equals_eager(dtype):
    from minflux.pointwise import node_kernel

    rng = np.random.default_rng(10)
    step = mf.compile(gated_concatenation)
    for k in range(CALLS):
        z = (rng.random((8, 1)) < 0.5).astype(dtype)
        u, x, w = (rng.normal(size=shape).astype(dtype) for shape in ((8, 16), (8, 5), (21, 3)))
        want = gated_concatenation(z, u, x, w)
        assert [bits(g) for g in step(z, u, x, w)] == [bits(g) for g in want], f"call {k}"
    if mf.get_elementwise_backend() == "numba":
        kernel = node_kernel._kernel((((0, 0),), ((0, 1),)), 1, 2, np.dtype(dtype), False, (1, 1, 0, 1, 1))
        assert native_runner.function_address(kernel.call) in set(native_form(step).program.tolist())


@mf.elementwise
def scaled_by(x, factor):
    return x * factor


def scaled_by_its_mean(x):
    y = np.multiply(x, 1.0)
    return np.multiply(scaled_by(y, y.mean()), 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_kernel_reading_a_new_numpy_scalar_each_call_runs_natively_and_equals_eager(dtype):
    rng = np.random.default_rng(9)
    step = mf.compile(scaled_by_its_mean)
    for k in range(CALLS):
        x = rng.normal(size=(4, 6)).astype(dtype)
        assert bits(step(x)) == bits(scaled_by_its_mean(x)), f"call {k}"
    if mf.get_elementwise_backend() == "numba":
        assert native_form(step).n_kernels == 1


class AddFromACell:
    """``np.add(x, s, out=out)`` whose command reads ``s`` from a cell the replay writes on each call,
    and declines a negative ``s`` (as a kernel declines a scalar of another type than its cell's)."""

    __name__ = "add_from_a_cell"

    def __call__(self, x, s, out=None):
        return np.add(x, s, out=out)

    def native_command(self, args, kwargs, errstate):
        (x, s), out = args, kwargs.get("out")
        if out is None:
            return None
        cell = np.array([s], x.dtype)

        def write(args, kwargs):
            if args[1] < 0:
                return False
            cell[0] = args[1]
            return True

        command = native_runner.map_words(0, x.dtype, 1, x.size, (x.ctypes.data, 0, 1), (cell.ctypes.data, 0, 0),
                                          (out.ctypes.data, 0, 1), 0, None)
        return command._replace(held=(cell,), refresh=(write, lambda args, kwargs: [args[1]]))


add_from_a_cell = mf.operation(AddFromACell(), results="out")


def plus_its_mean(x):
    y = np.multiply(x, 1.0)
    return np.multiply(add_from_a_cell(y, y.mean()), 1.0)


def test_a_command_reading_a_cell_gets_each_calls_value_or_its_call_runs_in_python():
    rng = np.random.default_rng(10)
    step = mf.compile(plus_its_mean)
    for k in range(CALLS):
        x = rng.normal(size=7) + (-3.0 if k > 20 and k % 3 == 0 else 3.0)
        assert bits(step(x)) == bits(plus_its_mean(x)), f"call {k}"
    assert native_form(step).n_commands == 3   # the copy in, the sum, the copy out (into a new array)


def scaled_last_column(x):
    y = np.multiply(x, 1.0)
    return np.multiply(scaled_by(y[:, -1:], 2.0), 1.0)   # a column: read by the kernel through a copy


def test_a_kernel_reading_a_strided_input_copies_it_natively_and_equals_eager():
    rng = np.random.default_rng(13)
    step = mf.compile(scaled_last_column)
    for k in range(CALLS):
        x = rng.normal(size=(9, 5))
        assert bits(step(x)) == bits(scaled_last_column(x)), f"call {k}"
    if mf.get_elementwise_backend() == "numba":
        assert native_form(step).n_kernels == 1


def sums_both_ways(x):
    y = np.multiply(x, 1.0)
    return np.multiply(np.add(y.sum(axis=1, keepdims=True), y.sum(axis=0)), 1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_along_and_across_rows_run_natively_and_equal_eager_for_72_calls(dtype):
    rng = np.random.default_rng(11)
    step = mf.compile(sums_both_ways)
    for k in range(CALLS):
        x = (rng.normal(size=(37, 300)) * 10.0 ** rng.integers(-3, 4, size=(37, 300))).astype(dtype)
        assert bits(step(x)) == bits(sums_both_ways(x)), f"call {k}"
    assert native_form(step).n_commands == 5   # the copy in, both sums, their sum, the copy out


def row_sums(x):
    return np.multiply(np.multiply(x, 1.0).sum(axis=1), 1.0)


def test_a_native_sum_that_overflows_warns_as_numpy_does():
    rng = np.random.default_rng(12)
    step = mf.compile(row_sums)
    for k in range(CALLS):
        x = rng.normal(size=(3, 50)).astype(np.float32)
        if k > 20 and k % 2:
            x[1] = 3e38
        (got, replay_warnings), (want, eager_warnings) = with_warnings(step, x), with_warnings(row_sums, x)
        assert bits(got) == bits(want), f"call {k}"
        assert replay_warnings == eager_warnings, f"call {k}"
    assert native_form(step).n_commands == 3   # the copy in, the sums, the copy out (into a new array)


def add_in_place(a, b):
    c = np.multiply(a, 1.0)
    np.add(c, b, out=c)
    return np.multiply(c, 1.0)


def product_in_place(a, b):
    c = np.multiply(a, 1.0)
    matrix_product.matmul(c, b, out=c)
    return np.multiply(c, 1.0)


@pytest.mark.parametrize("fn", [add_in_place, product_in_place])
def test_an_operation_in_place_gives_eagers_values_when_its_data_overflow_after_the_probe(fn, numpys_product):
    """Overflow in one element only: numpy warns and keeps the other elements' sums; doing the
    operation again from its overwritten operand would add twice."""
    step = mf.compile(fn)
    b = np.eye(2)
    for k in range(CALLS):
        a = np.array([[1.0, 2.0], [3.0, 1e308 if k > 20 else 4.0]])
        with warnings.catch_warnings(record=True) as eager_warnings:
            warnings.simplefilter("always")
            want = fn(a, 1e308 * b if k > 20 else b)
        with warnings.catch_warnings(record=True) as replay_warnings:
            warnings.simplefilter("always")
            got = step(a, 1e308 * b if k > 20 else b)
        assert bits(got) == bits(want), f"call {k}"
        assert [str(w.message) for w in replay_warnings] == [str(w.message) for w in eager_warnings]
    # the sum in place runs natively (through a scratch array), and so does the copy out of it; the product
    # into its factor does not, nor what reads it
    assert step.recordings == 1 and native_form(step).n_commands == (3 if fn is add_in_place else 1)


def test_an_input_laid_out_otherwise_runs_the_python_form(numpys_product):
    rng = np.random.default_rng(2)
    step = mf.compile(product_then_tanh)
    a, b = rng.normal(size=(6, 5)), rng.normal(size=(5, 7))
    for _ in range(10):
        step(a, b)
    form = native_form(step)
    inputs = [a, b]
    assert form.patch(inputs)
    assert not form.patch([a, np.asfortranarray(b)])   # the guard records again before it gets here
    assert not form.patch([a, b.astype(np.float32)])


def test_the_setting_keeps_every_replay_in_python(monkeypatch):
    monkeypatch.setenv("MINFLUX_NATIVE_REPLAY", "0")
    from minflux.runtime import settings

    monkeypatch.setattr(settings, "_values", {})
    rng = np.random.default_rng(3)
    step = mf.compile(product_then_tanh)
    for _ in range(10):
        a, b = rng.normal(size=(6, 5)), rng.normal(size=(5, 7))
        assert bits(step(a, b)) == bits(product_then_tanh(a, b))
    assert native_form(step) is None


def test_the_setting_takes_effect_at_the_next_call(numpys_product):
    from minflux.runtime import settings

    rng = np.random.default_rng(5)
    step = mf.compile(product_then_tanh)
    for _ in range(10):
        step(rng.normal(size=(6, 5)), rng.normal(size=(5, 7)))
    form = native_form(step)
    runs = []
    run = form._run
    form._run = lambda *args: (runs.append(args), run(*args))
    try:
        for native in (False, True):
            settings.set("native_replay", native)
            a, b = rng.normal(size=(6, 5)), rng.normal(size=(5, 7))
            assert bits(step(a, b)) == bits(product_then_tanh(a, b))
            assert len(runs) == native
    finally:
        settings.unset("native_replay")


def test_the_runner_stops_at_a_product_whose_flags_are_raised():
    """The runner's own contract: word 0 names the product, and the commands after it do not run."""
    found = native_runner.numpy_gemm(np.float64)
    flags = native_runner.fp_flags({"over": "raise"})
    if found is None or flags is None:
        pytest.skip("numpy's BLAS or this machine's floating-point flags are not known here")
    address, width = found
    variant = native_runner.GEMM_VARIANTS.index((np.dtype(np.float64), width))
    huge, c, d = np.full((2, 2), 1e200), np.zeros((2, 2)), np.zeros((2, 2))
    words = []
    for out in (c, d):
        words += native_runner.gemm_words(variant, address, 111, 111, 2, 2, 2, huge.ctypes.data, 2,
                                          huge.ctypes.data, 2, out.ctypes.data, 2, flags, None).words
    program = np.array([-1, *words], np.int64)
    native_runner.run(program, 1, len(program))
    assert program[0] == 1 and np.isinf(c).all() and (d == 0).all()


@mf.operation(results="views")
def absolute_unless_nonnegative(x):
    """Hands back ``x`` itself when it holds no negative number, else a new array."""
    return x if (x >= 0).all() else np.abs(x)


def through_a_data_dependent_view(a):
    return mf.sum(np.add(absolute_unless_nonnegative(np.multiply(a, 2.0)), 1.0) * a)


def test_what_reads_an_operation_whose_result_moves_with_the_data_stays_python():
    rng = np.random.default_rng(4)
    step = mf.compile(through_a_data_dependent_view)
    for _ in range(10):
        a = rng.uniform(0.0, 1.0, size=(8, 5))
        assert bits(step(a)) == bits(through_a_data_dependent_view(a))
    assert native_form(step).n_commands >= 1   # the doubling runs natively
    for k in range(CALLS - 10):
        a = rng.normal(size=(8, 5))             # now its result is a new array on most calls
        assert bits(step(a)) == bits(through_a_data_dependent_view(a)), f"call {k}"
    assert step.recordings == 1



@mf.operation(results="views")
def product_or_view(g, p, view: bool):
    """Hands back ``p`` itself or a new array, as its constant says."""
    return p if view else g * p


product_or_view.__wrapped_operation__.steady_results = True


def through_a_new_product(g, p):
    product = product_or_view(np.multiply(g, 1.0), np.multiply(p, 1.0), False)
    return np.multiply(np.multiply(product, 2.0), 1.0)


def test_what_reads_a_new_array_from_an_operation_with_steady_results_stays_python(monkeypatch):
    """``steady_results``: whether the results are views or new arrays is decided by layouts and
    constants; a new array lies elsewhere on every call. Its address may lie in memory that stays put
    (where the probe allocated an array a command holds after freeing it): the rule alone must keep
    its readers in Python, so here every address but an input's counts as memory that stays put."""
    from minflux.schedule.native_places import Places

    locate = Places.locate
    monkeypatch.setattr(Places, "locate", lambda self, address: locate(self, address) or "fixed")
    rng = np.random.default_rng(5)
    step = mf.compile(through_a_new_product)
    for k in range(CALLS):
        g, p = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
        assert bits(step(g, p)) == bits(through_a_new_product(g, p)), f"call {k}"
    assert native_form(step).n_commands >= 2   # the copies in, not the doubling


def through_a_view_beside_a_new_array(g, p):
    view = product_or_view(np.sort(g), np.multiply(p, 1.0), True)   # np.sort: a new array on every call
    return np.multiply(np.multiply(view, 2.0), 1.0)


def test_what_reads_a_view_from_an_operation_with_steady_results_runs_natively_whatever_else_it_reads():
    rng = np.random.default_rng(6)
    step = mf.compile(through_a_view_beside_a_new_array)
    for k in range(CALLS):
        g, p = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
        assert bits(step(g, p)) == bits(through_a_view_beside_a_new_array(g, p)), f"call {k}"
    assert native_form(step).n_commands == 3   # the copy in, the doubling of its view, the copy out


def test_a_probe_that_raises_probes_again_at_the_next_call(numpys_product):
    rng = np.random.default_rng(6)
    step = mf.compile(product_then_tanh)
    with np.errstate(over="raise"):
        for _ in range(7):   # recorded, five Python replays, the straight-line one
            step(rng.normal(size=(6, 5)), rng.normal(size=(5, 7)))
        with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
            step(np.full((6, 5), 1e300), np.full((5, 7), 1e300))   # the probe replay
        assert native_form(step) is None
        a, b = rng.normal(size=(6, 5)), rng.normal(size=(5, 7))
        assert bits(step(a, b)) == bits(product_then_tanh(a, b))
    assert native_form(step) is not None and step.recordings == 1


def test_a_command_that_cannot_be_made_leaves_its_call_in_python_with_one_warning(numpys_product, monkeypatch):
    import minflux.matrix_product as products

    def broken(args, kwargs, errstate):
        raise ValueError("a command builder's bug")

    monkeypatch.setattr(products.matmul.__wrapped_operation__, "native_command", broken)
    rng = np.random.default_rng(7)
    step = mf.compile(product_then_tanh)
    with pytest.warns(RuntimeWarning, match="stays a Python call"):
        for _ in range(10):
            a, b = rng.normal(size=(6, 5)), rng.normal(size=(5, 7))
            assert bits(step(a, b)) == bits(product_then_tanh(a, b))
    assert native_form(step) is None or native_form(step).n_products == 0
