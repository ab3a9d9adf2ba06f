"""Independent products of a native segment run at once (`minflux.schedule.native_groups`) and give
the eager function's bits, call after call; the order they run in keeps every dependency.

The products here are small, so each test lowers the size from which products run together to one
multiply-add and has the free-core rule report two cores, so that the groups form and run on the pool
whatever the size and the load of the machine running the tests.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minflux as mf
from minflux import matrix_product
from minflux.schedule import Recording, Replay, native_groups
from minflux.schedule.replay import COMPILE_AFTER
from tests.compiled.test_models_compiled import CALLS, bits, trained_to_eagers_bits
from tests.compiled.test_native_replay import compile_after_five_replays, native_form, numpys_product  # noqa: F401


@pytest.fixture
def groups_at_every_size(monkeypatch):
    monkeypatch.setattr(native_groups, "GROUP_MIN_MULTIPLY_ADDS", 1)
    monkeypatch.setattr("minflux.schedule.native_steps.threads_now", lambda: 2)
    monkeypatch.setattr("minflux.schedule.native.usable_cores", lambda: 2)


def three_normalised_terms(h, g, k, u, v, w):
    """Three independent products, each scaled and shifted by the commands after it, then summed."""
    a = np.add(np.multiply(matrix_product.matmul(h, u), 0.5), 1.0)
    b = np.add(np.multiply(matrix_product.matmul(g, v), 0.25), 2.0)
    c = np.add(np.multiply(matrix_product.matmul(k, w), 2.0), 3.0)
    return np.add(np.add(a, b), c)


def inputs(rng, dtype=np.float32, scale=1.0):
    shapes = [(8, 16), (8, 12), (8, 10), (16, 24), (12, 24), (10, 24)]
    return [(scale * rng.normal(size=shape)).astype(dtype) for shape in shapes]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_products_run_together_give_eagers_bits_for_72_calls(dtype, groups_at_every_size):
    rng = np.random.default_rng(3)
    step = mf.compile(three_normalised_terms)
    for k in range(CALLS):
        args = inputs(rng, dtype)
        assert bits(step(*args)) == bits(three_normalised_terms(*args)), f"call {k}"
    form = native_form(step)
    assert form.n_products == 3 and form.n_grouped == 2   # two cores: two products at once, then one


def test_without_groups_the_same_products_run_in_turn(monkeypatch):
    """The threshold is what forms the groups: without lowering it these products run in turn."""
    rng = np.random.default_rng(3)
    step = mf.compile(three_normalised_terms)
    for _ in range(12):
        step(*inputs(rng))
    assert native_form(step).n_products == 3 and native_form(step).n_grouped == 0


def overflows_as_eager(when: str, eager, step, args) -> None:
    """Under ``np.errstate(over=when)``: ``step(*args)`` raises where ``eager(*args)`` raises, or warns
    as it warns and gives its bits."""
    if when == "raise":
        with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
            eager(*args)
        with pytest.raises(FloatingPointError, match="overflow encountered in matmul"):
            step(*args)
        return
    with pytest.warns(RuntimeWarning, match="overflow encountered in matmul"):
        want = eager(*args)
    with pytest.warns(RuntimeWarning, match="overflow encountered in matmul"):
        got = step(*args)
    assert [bits(a) for a in _outputs(got)] == [bits(a) for a in _outputs(want)]


def _outputs(result) -> list:
    return list(result) if isinstance(result, (tuple, list)) else [result]


@pytest.mark.parametrize("when", ["raise", "warn"])
def test_a_product_of_a_group_that_overflows_raises_or_warns_as_numpy_does(when, groups_at_every_size,
                                                                          numpys_product):
    rng = np.random.default_rng(4)
    step = mf.compile(three_normalised_terms)
    with np.errstate(over=when):
        for _ in range(10):
            args = inputs(rng)
            assert bits(step(*args)) == bits(three_normalised_terms(*args))
        assert native_form(step).n_grouped == 2
        huge = inputs(rng)
        huge[1], huge[4] = np.full_like(huge[1], 1e30), np.full_like(huge[4], 1e30)   # the second product
        overflows_as_eager(when, three_normalised_terms, step, huge)
        args = inputs(rng)   # and the next call runs its groups again, silent
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert bits(step(*args)) == bits(three_normalised_terms(*args))
    assert step.recordings == 1


@pytest.mark.parametrize("when", ["raise", "warn"])
def test_the_product_run_beside_other_commands_gives_eagers_bits_and_overflows_as_numpy_does(
        when, groups_at_every_size, numpys_product):
    """Two products run together, then the third beside the copies of the first two into one array
    (commands with no check to stop at); where the third overflows, numpy's call raises or warns,
    and the copies beside it ran once."""
    rng = np.random.default_rng(5)
    step = mf.compile(products_and_copies)
    with np.errstate(over=when):
        for k in range(CALLS):
            args = inputs(rng)
            assert [bits(a) for a in step(*args)] == [bits(a) for a in products_and_copies(*args)], f"call {k}"
        form = native_form(step)
        assert form.n_grouped == 2 and form.n_beside == 1
        huge = inputs(rng)
        huge[2], huge[5] = np.full_like(huge[2], 1e30), np.full_like(huge[5], 1e30)   # the third product
        overflows_as_eager(when, products_and_copies, step, huge)
    assert step.recordings == 1


def products_and_copies(h, g, k, u, v, w):
    """Three independent products: the first two stacked into a buffer (copies) and shifted, the third
    doubled."""
    a, b, c = matrix_product.matmul(h, u), matrix_product.matmul(g, v), matrix_product.matmul(k, w)
    return np.add(np.stack([a, b]), 1.0), np.multiply(c, 2.0)


def product_scaling_product(h, u, x, g, v):
    """A product, a scaling that may overflow and a second product that needs neither: the two products
    run together, ahead of the scaling."""
    a = matrix_product.matmul(h, u)
    c = np.multiply(x, 1e30)
    return np.add(np.add(a, matrix_product.matmul(g, v)), c)


def caught(fn, *args) -> tuple:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = fn(*args)
    return result, [str(w.message) for w in seen]


@pytest.mark.parametrize("when", ["raise", "warn"])
def test_a_check_run_after_a_later_product_warns_and_raises_in_the_eager_order(when, groups_at_every_size,
                                                                                numpys_product):
    """The scaling and the second product overflow: the eager call warns for the scaling first, or
    raises there; so does the step, although it ran the product first."""
    rng = np.random.default_rng(6)
    step = mf.compile(product_scaling_product)
    with np.errstate(over=when):
        for k in range(CALLS):
            h, g, _, u, v, _ = inputs(rng)
            x = rng.normal(size=(8, 24)).astype(np.float32)
            assert bits(step(h, u, x, g, v)) == bits(product_scaling_product(h, u, x, g, v)), f"call {k}"
        form = native_form(step)
        assert form.n_grouped == 2 and form.n_commands == 5
        x, g, v = np.full_like(x, 1e30), np.full_like(g, 1e38), np.ones_like(v)   # 1e60 and 12 terms of 1e38
        if when == "raise":
            with pytest.raises(FloatingPointError, match="overflow encountered in multiply"):
                product_scaling_product(h, u, x, g, v)
            with pytest.raises(FloatingPointError, match="overflow encountered in multiply"):
                step(h, u, x, g, v)
        else:
            want, eager_warnings = caught(product_scaling_product, h, u, x, g, v)
            got, step_warnings = caught(step, h, u, x, g, v)
            assert len(eager_warnings) == 2 and step_warnings == eager_warnings
            assert bits(got) == bits(want)
    assert step.recordings == 1


@pytest.mark.parametrize("case", ["hmlstm-branch-ln", pytest.param("lstm-cell", marks=pytest.mark.slow)])
def test_training_with_products_run_together_equals_eager_to_the_bit_for_72_steps(case, groups_at_every_size):
    assert native_form(trained_to_eagers_bits(case, seed=8)).n_grouped > 0


def random_accesses(rng, n: int) -> list:
    """``n`` commands' accesses: a few ranges each in a small memory, read or written, some in the
    inputs, some everywhere."""
    found = []
    for _ in range(n):
        if rng.random() < 0.05:
            found.append(native_groups._EVERYWHERE)
            continue
        spans = []
        for _ in range(rng.integers(1, 4)):
            if rng.random() < 0.15:
                spans.append((native_groups._INPUTS, 0, 0, bool(rng.random() < 0.3)))
            else:
                low = int(rng.integers(0, 60))
                spans.append((0, low, low + int(rng.integers(1, 8)), bool(rng.random() < 0.4)))
        found.append(tuple(spans))
    return found


def meet(x, y) -> bool:
    """Whether two commands' accesses touch one byte that either writes, by the bytes themselves."""
    def cells(accesses, written_only):
        return {(p, c) for p, lo, hi, w in accesses if w or not written_only
                for c in (range(1 << 62, (1 << 62) + 1) if p == native_groups._INPUTS else range(lo, min(hi, 100)))}
    everywhere = native_groups._EVERYWHERE
    if x == everywhere or y == everywhere:
        return True
    return bool(cells(x, True) & cells(y, False)) or bool(cells(y, True) & cells(x, False))


def writes_inputs(accesses) -> bool:
    return any(p == native_groups._INPUTS and w for p, _, _, w in accesses)


@pytest.mark.parametrize("seed", range(40))
def test_a_plan_runs_every_command_once_after_everything_it_depends_on(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 30 if seed % 4 else 3 * native_groups.WINDOW))   # every fourth: in windows
    accesses = random_accesses(rng, n)
    work = [int(rng.choice([0, 1 << 30])) for _ in range(n)]
    most = int(rng.integers(2, 4))
    order = native_groups.plan(accesses.__getitem__, work, most)
    when: dict = {}
    for at, step in enumerate(order):
        group = step if step.__class__ is tuple else (step,)
        assert len(group) <= most
        if len(group) > 1:
            assert all(work[i] for i in group), "only products run together"
            assert not any(meet(accesses[i], accesses[j]) for i in group for j in group if i < j)
        for i in group:
            assert i not in when
            when[i] = at
    assert sorted(when) == list(range(n))
    for j in range(n):
        for i in range(j):
            if meet(accesses[i], accesses[j]):
                assert when[i] < when[j], f"command {j} ran before {i}, whose memory it shares"
            if writes_inputs(accesses[j]):
                assert when[i] < when[j], f"command {j} writes the inputs before {i} ran"


@pytest.mark.parametrize("seed", range(40))
def test_commands_run_beside_a_product_keep_every_dependency(seed):
    """A product that would run alone runs beside consecutive commands that may (no check to stop at):
    none of them shares memory with it, and each runs after everything it depends on, the run's own
    commands one after the other."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(2, 30 if seed % 4 else 3 * native_groups.WINDOW))
    accesses = random_accesses(rng, n)
    work = [int(rng.choice([0, 0, 1 << 30])) for _ in range(n)]
    beside = [not w and bool(rng.random() < 0.8) for w in work]
    order = native_groups.plan(accesses.__getitem__, work, 2, beside)
    when: dict = {}   # command -> (step, place in its step's run: 0 for a product)
    runs = 0
    for at, step in enumerate(order):
        group = step if step.__class__ is tuple else (step,)
        if group[-1].__class__ is list:
            (product,), run = group[:-1], group[-1]
            runs += 1
            assert work[product] and run == list(range(run[0], run[0] + len(run))) and all(beside[i] for i in run)
            assert not any(meet(accesses[product], accesses[i]) for i in run)
            group = (product, *run)
            places = [0, *range(1, len(run) + 1)]
        else:
            places = [0] * len(group)
        for i, place in zip(group, places):
            assert i not in when
            when[i] = (at, place)
    assert sorted(when) == list(range(n))
    for j in range(n):
        for i in range(j):
            if meet(accesses[i], accesses[j]):
                assert when[i] < when[j] and (when[i][0] < when[j][0] or when[i][1] > 0), \
                    f"command {j} ran before or beside {i}, whose memory it shares"
            if writes_inputs(accesses[j]):
                assert when[i][0] < when[j][0], f"command {j} writes the inputs before or beside {i}"
    if seed == 0:
        assert runs > 0


def test_a_product_alone_runs_beside_the_commands_that_do_not_need_it():
    product = ((0, 0, 10, False), (0, 10, 20, True))
    accesses = [product,
                ((0, 30, 40, False), (0, 40, 50, True)),    # independent
                ((0, 40, 50, False), (0, 50, 60, True)),    # needs the one before: beside too, after it
                ((0, 10, 20, False), (0, 60, 70, True)),    # reads the product
                ((0, 70, 80, False), (0, 80, 90, True))]    # independent, but after one that waits
    work = [1 << 30, 0, 0, 0, 0]
    assert native_groups.plan(accesses.__getitem__, work, 2, [False, True, True, True, True]) == [(0, [1, 2]), 3, 4]
    # the first that may not run beside it: the next independent one that may does (2 waits on 1)
    assert native_groups.plan(accesses.__getitem__, work, 2, [False, False, True, True, True]) == [(0, [4]), 1, 2, 3]
    assert native_groups.plan(accesses.__getitem__, work, 1, [False, True, True, True, True]) == [0, 1, 2, 3, 4]


def test_two_independent_products_wait_for_what_the_second_needs_and_run_together():
    reads, writes = (0, 0, 10, False), (0, 10, 20, True)
    accesses = [(reads, writes),                               # a product
                ((0, 30, 40, False), (0, 40, 50, True)),        # what the next product reads
                ((0, 40, 50, False), (0, 50, 60, True)),        # a product
                ((0, 10, 20, False), (0, 60, 70, True))]        # reads the first product
    assert native_groups.plan(accesses.__getitem__, [1 << 30, 0, 1 << 30, 0], 2) == [1, (0, 2), 3]
    # on one core, as recorded
    assert native_groups.plan(accesses.__getitem__, [1 << 30, 0, 1 << 30, 0], 1) == [0, 1, 2, 3]


def test_a_products_buffer_takes_no_memory_used_since_the_product_before_it(monkeypatch):
    """Kept apart, the second product's result lies where nothing since the first was placed has
    been; without the rule it reuses the first product's result, freed by the scaling."""
    monkeypatch.setattr(native_groups, "GROUP_MIN_MULTIPLY_ADDS", 1)
    rec = Recording("f")
    h, u, g, v = (rec.input(np.ones(shape, np.float32)) for shape in ((4, 8), (8, 16), (4, 8), (8, 16)))
    a = np.multiply(matrix_product.matmul(h, u), 2.0)
    b = np.multiply(matrix_product.matmul(g, v), 3.0)
    out = np.add(a, b)
    products = [i for i, step in enumerate(rec.steps) if step.fn is matrix_product.matmul.__wrapped_operation__]
    replay = Replay(rec, [out.slot])
    rec.close()
    args = [np.ones((4, 8), np.float32), np.ones((8, 16), np.float32)] * 2
    for _ in range(COMPILE_AFTER + 1):
        assert replay(args)[0].tolist() == np.full((4, 16), 8.0 * 2 + 8.0 * 3).tolist()
    first, second = (replay.buffers.outs[i] for i in products)
    assert not np.may_share_memory(first, second)


@mf.elementwise
def soft_gate(x, y):
    return mf.log(1.0 + mf.exp(x)) * y if x < 2.0 else x * y


def large_gradients(x, y):
    """Kernels and node gradient sums of 147,456 elements: large enough that their launchers split
    their rows over threads."""
    return mf.gradient(lambda x, y: mf.sum(mf.broadcast(soft_gate, x, y) * mf.tanh(x)), x, y)


def row_share_steps(form) -> int:
    return sum(1 for st in form.statements if st.params and st.params[0] == form.in_groups
               for step in st.params[1] if step[0].__class__ is tuple)


@pytest.fixture
def splitting_pays(monkeypatch):
    """Every large launch splits, as on a machine where its first calls measured splitting faster
    (`minflux.runtime.split_choice`), whatever this machine's timings say."""
    from minflux.runtime.split_choice import SplitChoice

    monkeypatch.setattr(SplitChoice, "threads", lambda self, free: free)
    monkeypatch.setattr(SplitChoice, "took", lambda self, n_threads, seconds: None)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_kernels_run_their_rows_in_shares_and_equal_eager_for_72_calls(dtype, groups_at_every_size,
                                                                              splitting_pays):
    rng = np.random.default_rng(10)
    step = mf.compile(large_gradients)
    with mf.fusion(compile_after=1):   # fused from the first call, as the replays are
        for k in range(CALLS):
            x, y = rng.normal(size=(384, 384)).astype(dtype), rng.normal(size=(384, 384)).astype(dtype)
            x[rng.integers(0, 384, 20), rng.integers(0, 384, 20)] = 2.0   # the branch's edge
            assert [bits(g) for g in step(x, y)] == [bits(g) for g in large_gradients(x, y)], f"call {k}"
    if mf.get_elementwise_backend() == "numba":
        assert row_share_steps(native_form(step)) > 0
