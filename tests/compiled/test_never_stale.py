"""Whatever a recording read is in its guard key, or the recording is refused: a replay is never stale.

Each test changes one thing a compiled function reads between calls and compares the compiled
function with the same function run eagerly, bit for bit.
"""
from __future__ import annotations

import dataclasses
import os
import random
import time
import warnings

import numpy as np
import pytest
from numpy.random import Generator

import minflux as mf
from minflux.compiled import step as step_module
from tests.compiled.step_programs import same

SCALE = 2.0
WEIGHTS = np.array([1.0, 2.0])
SHIFT = np.float64(0.5)
rng_global = np.random.default_rng(0)


class Settings:
    factor = 1.0


SETTINGS = Settings()


def scaled(x):
    return mf.tanh(x) * SCALE


def weighted(x):
    return x * WEIGHTS + SHIFT


def by_settings(x):
    return x * SETTINGS.factor


def calls_scaled(x):
    return scaled(x) + 1.0


def test_module_globals_read_by_the_function_and_by_what_it_calls_are_in_the_key():
    global SCALE, WEIGHTS, SHIFT
    x = np.linspace(-1, 1, 2)
    f, g, h = mf.compile(scaled), mf.compile(weighted), mf.compile(calls_scaled)
    saved = SCALE, WEIGHTS, SHIFT
    try:
        for scale, weights, shift in [(2.0, WEIGHTS, SHIFT), (3.0, WEIGHTS, SHIFT), (3.0, WEIGHTS * 4, SHIFT),
                                      (3.0, WEIGHTS, np.float64(-1.5)), (2.0, saved[1], saved[2])] * 2:
            SCALE, WEIGHTS, SHIFT = scale, weights, shift
            assert same(f(x), scaled(x)) and same(g(x), weighted(x)) and same(h(x), calls_scaled(x))
    finally:
        SCALE, WEIGHTS, SHIFT = saved
    assert f.replays > 0 and h.replays > 0


WINDOW = 1.0


@mf.scalar_rule(lambda m, x, y: m.where(abs(x) < WINDOW, 0.5, 0.0))
def straight_through(x):
    return 1.0 if x > 0 else 0.0


@mf.elementwise
def detect(x):
    return straight_through(x)


def detected_gradient(x):
    return mf.gradient(lambda x: mf.sum(mf.broadcast(detect, x) * x), x)[0]


def test_a_global_read_by_a_scalar_rules_derivative_rule_is_in_the_key():
    global WINDOW
    x = np.linspace(-1.5, 1.5, 7)
    f = mf.compile(detected_gradient)
    try:
        for window in [1.0, 0.25, 2.0, 1.0] * 18:
            WINDOW = window
            assert same(f(x), detected_gradient(x))
    finally:
        WINDOW = 1.0
    assert f.replays > 0


def test_an_array_global_updated_in_place_is_an_input_of_the_replay():
    x = np.ones(2)
    f = mf.compile(weighted)
    saved = WEIGHTS.copy()
    try:
        for k in range(5):
            WEIGHTS[...] = k
            assert same(f(x), weighted(x))
    finally:
        WEIGHTS[...] = saved
    assert f.recordings == 1


def test_an_attribute_of_a_global_object_is_in_the_key():
    f, x = mf.compile(by_settings), np.ones(3)
    for factor in (1.0, 2.0, 1.0, -0.0, 0.0):
        SETTINGS.factor = factor
        assert same(f(x), by_settings(x))
    SETTINGS.factor = 1.0


def test_a_closure_counter_is_refused_and_with_fallback_runs_as_eager():
    def make():
        n = 0

        def step(x):
            nonlocal n
            n += 1
            return x * 2 if n % 2 else x * 3
        return step

    with pytest.raises(mf.NotReplayable, match=r"closure variable `n`.* must be an array"):
        mf.compile(make())(np.ones(1))
    eager, compiled = make(), make()
    f = mf.compile(compiled, fallback="eager")
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        got = [f(np.ones(1))[0] for _ in range(4)]
    assert got == [eager(np.ones(1))[0] for _ in range(4)] == [2.0, 3.0, 2.0, 3.0]


def test_a_closure_over_an_array_and_a_function_argument_whose_closure_changes():
    def make(w):
        return lambda x: x * w

    f = mf.compile(lambda fn, x: fn(x) + 1.0)
    x = np.arange(3.0)
    for w in (1.0, 2.0, np.array(3.0), np.array([1.0, -1.0, 0.5]), 1.0):
        fn = make(w)
        assert same(f(fn, x), fn(x) + 1.0)
    assert f.replays >= 1


def clock(x):
    return x * time.time()


def python_random(x):
    return x * random.random()


def environment(x):
    return x * float(len(os.environ.get("HOME", "")))


def numpy_global_random(x):
    return x + np.random.normal(size=x.shape)


def fresh_generator(x):
    return x + np.random.default_rng().normal(size=x.shape)


@pytest.mark.parametrize("fn, why", [(clock, "reads the clock"), (python_random, "Python's global random"),
                                     (environment, "environment"), (numpy_global_random, "numpy's global random"),
                                     (fresh_generator, "Generator")])
def test_impure_reads_are_refused_and_with_fallback_run_eagerly(fn, why):
    with pytest.raises(mf.NotReplayable, match=why):
        mf.compile(fn)(np.ones(2))
    f = mf.compile(fn, fallback="eager")
    with pytest.warns(RuntimeWarning, match=why):
        first = f(np.ones(2))
    assert f.recordings == 0 and first.shape == (2,)


def draw_from_global_generator(x):
    return x + rng_global.normal(size=x.shape)


def test_a_generator_in_a_global_is_drawn_from_on_every_replay():
    global rng_global
    f = mf.compile(draw_from_global_generator)
    rng_global = np.random.default_rng(7)
    got = [f(np.zeros(2)) for _ in range(5)]
    rng_global = np.random.default_rng(7)
    want = [draw_from_global_generator(np.zeros(2)) for _ in range(5)]
    assert all(same(a, b) for a, b in zip(got, want)) and f.replays == 4
    assert not same(got[0], got[1])


def imports_the_clock(x):
    import time
    return x * (time.time() % 1.0)


def imports_the_environment(x):
    import os
    return x * len(os.environ)


def imports_numpys_random(x):
    from numpy import random as npr
    return x + npr.normal()


def silences_its_warnings(x):
    with warnings.catch_warnings():       # eagerly its log of zero is silent; a replay would warn
        warnings.simplefilter("ignore")
        return np.log(x)


@pytest.mark.parametrize("fn, why", [(imports_the_clock, "reads the clock"), (imports_the_environment, "environment"),
                                     (imports_numpys_random, "numpy's global random"),
                                     (silences_its_warnings, "warning filters")])
def test_process_state_read_or_changed_through_a_module_is_refused_naming_it(fn, why):
    with pytest.raises(mf.NotReplayable, match=f"{why}.*`(import|warnings)"):
        mf.compile(fn)(np.ones(2))


def test_objects_that_cannot_be_keyed_are_refused():
    f = mf.compile(lambda batches: next(batches) * 2.0)
    with pytest.raises(mf.NotReplayable, match="iterator"):
        f(iter([np.ones(2), np.zeros(2)]))
    with pytest.raises(mf.NotReplayable, match="RandomState"):
        mf.compile(lambda r, x: x + r.normal(size=2))(np.random.RandomState(0), np.ones(2))
    for source in (np.random.PCG64(0), np.random.SeedSequence(1)):   # a Generator made of one draws anew
        with pytest.raises(mf.NotReplayable, match=f"{type(source).__name__}, whose draws"):
            mf.compile(lambda bits, x: x + Generator(bits).random())(source, np.ones(2))

    class ForeignArray:        # what a torch or JAX array looks like to the guard
        def __init__(self, value):
            self.value = value

        def __array__(self, dtype=None, copy=None):
            return self.value

        def __dlpack__(self, stream=None):
            raise NotImplementedError

    with pytest.raises(mf.NotReplayable, match=r"ForeignArray array; convert it first"):
        mf.compile(lambda x: mf.tanh(np.asarray(x)))(ForeignArray(np.ones(2)))


@dataclasses.dataclass(slots=True)
class SlotConfig:
    scale: float


def test_slotted_objects_and_sets_are_keyed_by_their_contents():
    f = mf.compile(lambda config, x: x * config.scale)
    config, x = SlotConfig(2.0), np.ones(2)
    assert same(f(config, x), x * 2.0)
    config.scale = 5.0
    assert same(f(config, x), x * 5.0)
    g = mf.compile(lambda names, x: x * len(names) if "a" in names else x)
    assert same(g({"a", "b"}, x), x * 2) and same(g({"b"}, x), x) and same(g({"a", "b", "c"}, x), x * 3)


def test_numbers_are_keyed_by_their_bits():
    f = mf.compile(lambda x, d: x / d)
    x = np.ones(2)
    with np.errstate(divide="ignore"):
        assert same(f(x, 0.0), x / 0.0) and same(f(x, -0.0), x / -0.0)
        assert same(f(x, np.float64(-0.0)), x / -0.0)
    g = mf.compile(lambda x, v: x + v)
    for _ in range(3):
        assert same(g(x, float("nan")), x + float("nan"))
    assert g.recordings == 1 and g.replays == 2


def test_numpys_error_state_is_in_the_key():
    f = mf.compile(lambda x: x * 1e300)
    x = np.full(2, 1e300)
    with np.errstate(over="ignore"):
        assert same(f(x), np.full(2, np.inf))
    with np.errstate(over="raise"):
        with pytest.raises(FloatingPointError):
            f(x)
    with np.errstate(over="ignore"):
        assert same(f(x), np.full(2, np.inf)) and f.replays == 1


def test_a_compiled_function_under_the_tape_is_differentiated_as_eager():
    w = np.array([0.7, -0.3])
    inner = mf.compile(mf.tanh)

    def loss(w):
        return mf.sum(inner(w * 3.0)) + mf.sum(w * w)

    with pytest.warns(RuntimeWarning, match="runs eagerly under mf.gradient"):
        (g,) = mf.gradient(loss, w)
    np.testing.assert_allclose(g, 3 * (1 - np.tanh(3 * w) ** 2) + 2 * w, rtol=1e-14)


def test_a_compiled_function_called_while_another_records_is_part_of_that_recording():
    inner = mf.compile(lambda x: mf.tanh(x) * 2.0)
    outer = mf.compile(lambda x: inner(x) + inner(x * 2.0))
    for k in range(4):
        x = np.full(3, 0.1 * k)
        assert same(outer(x), (np.tanh(x) * 2.0) + np.tanh(x * 2.0) * 2.0)
    assert outer.recordings == 1 and outer.replays == 3 and inner.recordings == 0


def test_keyword_arguments_and_methods():
    class Scaler:
        def __init__(self):
            self.w = np.array([2.0, 3.0])

        @mf.compile
        def apply(self, x, *, shift=0.0):
            return x * self.w + shift

    s, x = Scaler(), np.ones(2)
    for shift in (0.0, 1.0, 0.0):
        assert same(s.apply(x, shift=shift), x * s.w + shift)
    s.w *= 2
    assert same(s.apply(x), x * s.w)


def test_a_cyclic_argument_tree_and_a_recursive_function():
    tree = {"w": np.ones(2)}
    tree["self"] = tree

    def depth(x, n):
        return x if n == 0 else depth(x * 2.0, n - 1)

    f = mf.compile(lambda t, x: depth(x, 3) * t["self"]["w"])
    for _ in range(3):
        assert same(f(tree, np.ones(2)), np.full(2, 8.0))
    assert f.replays == 2


def test_layouts_replay_to_the_bit_past_the_straight_line_form():
    f = mf.compile(lambda x, w: mf.sum(mf.tanh(x @ w), axis=0) + mf.sum(x, axis=1)[:1])
    rng = np.random.default_rng(5)
    for k in range(75):
        x = rng.normal(size=(7, 7))
        x = np.asfortranarray(x) if k % 3 == 0 else (x.T if k % 3 == 1 else x)
        w = rng.normal(size=(7, 7))
        want = mf.sum(mf.tanh(x @ w), axis=0) + mf.sum(x, axis=1)[:1]
        assert same(f(x, w), want)
    assert f.recordings == 2     # C order, and Fortran order (a transposed C array is laid out alike)


def adam_step(model, state, x):
    loss, (grads,) = mf.withgradient(lambda m: mf.sum(mf.tanh(m["w"] * x)), model)
    mf.optim.update(state, model, grads)
    return float(loss)           # a host read after the update: the recording is refused


def test_a_refused_recording_with_fallback_leaves_everything_as_it_found_it():
    def fresh():
        model = {"w": np.array([0.5, -1.5])}
        return model, mf.optim.setup(mf.optim.Adam(0.1), model)

    model, state = fresh()
    twin_model, twin_state = fresh()
    f = mf.compile(adam_step, fallback="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for k in range(3):
            x = np.full(2, 1.0 + k)
            assert f(model, state, x) == adam_step(twin_model, twin_state, x)
    assert same(model["w"], twin_model["w"])
    for (_, a), (_, b) in zip(mf.optim.named_state_leaves(state), mf.optim.named_state_leaves(twin_state)):
        assert all(same(u, v) for u, v in zip(mf.tree.leaves(a.state), mf.tree.leaves(b.state)))


@pytest.mark.parametrize("compile_after", [1, 2, 12])
def test_a_recording_is_kept_once_fusion_has_settled_and_matches_eager(compile_after, monkeypatch):
    made = []

    class CountedRecording(step_module.Recording):
        def __init__(self, name):
            made.append(name)
            super().__init__(name)

    monkeypatch.setattr(step_module, "Recording", CountedRecording)

    def loss(x, y):               # an expression of its own for each case: not compiled before
        z = x * y + 1.0
        for _ in range({1: 1, 2: 2, 12: 3}[compile_after]):
            z = mf.tanh(z) * mf.sigmoid(y)
        return mf.sum(z)

    def body(x, y):
        return mf.withgradient(loss, x, y)

    rng = np.random.default_rng(compile_after)
    x, y = rng.normal(size=5000), rng.normal(size=5000)
    with mf.fusion(compile_after=compile_after):
        f = mf.compile(body, warn_after=100)
        got = [f(x, y) for _ in range(compile_after + 20)]
        want = body(x, y)           # fusion has compiled the expression by now, as in the replays
    assert all(same(a, b) for a, b in zip(mf.tree.leaves(got[-1]), mf.tree.leaves(want)))
    assert f.recordings == 1 and len(made) == compile_after   # the last recording call is the settled one
