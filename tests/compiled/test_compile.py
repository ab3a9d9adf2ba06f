"""`mf.compile`'s guarantees: guarded, never stale, never silent, and the function's side effects replayed."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import minflux as mf


def scaled_tanh(x, scale):
    return mf.tanh(x) * scale


def test_a_new_guard_key_records_again_and_old_keys_still_replay():
    f = mf.compile(scaled_tanh)
    a, b = np.linspace(-1, 1, 6), np.linspace(-1, 1, 4)
    for x, scale in [(a, 2.0), (a, 2.0), (b, 2.0), (a, 3.0), (a, 2.0), (b, 2.0), (a.astype(np.float32), 2.0)]:
        got = f(x, scale)
        expected = np.tanh(x) * scale
        assert got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
    assert f.recordings == 4 and f.replays == 3   # (a, 2), (b, 2), (a, 3), float32 a; three repeats


def test_a_value_that_changes_inside_the_function_must_be_an_array():
    def count(state):
        state["calls"] += 1
        return state["w"] * 2

    with pytest.raises(mf.NotReplayable, match=r"changes argument 0's calls from 0 to 1: a value that changes"):
        mf.compile(count)({"calls": 0, "w": np.ones(2)})


def test_rebound_attributes_and_in_place_updates_are_replayed_on_the_callers_objects():
    class Counter:
        def __init__(self):
            self.total = np.zeros(2)
            self.steps = np.zeros((), np.int64)

    def accumulate(counter, x):
        counter.total = counter.total + x      # rebinds the attribute to a new array
        counter.steps += 1                     # updates the array in place
        return counter

    f = mf.compile(accumulate)
    counter = Counter()
    for k in range(4):
        assert f(counter, np.full(2, k + 1.0)) is counter   # the caller's own object comes back
    np.testing.assert_array_equal(counter.total, [10.0, 10.0])
    assert int(counter.steps) == 4 and f.replays == 3


def test_a_host_read_is_a_clear_error_or_with_fallback_an_eager_call():
    def relu_if_positive(x):
        return x if float(x.sum()) > 0 else -x

    with pytest.raises(mf.NotReplayable, match=r"test_compile\.py:\d+ .*float\(x\.sum\(\)\).* reads an array"):
        mf.compile(relu_if_positive)(np.ones(2))
    f = mf.compile(relu_if_positive, fallback="eager")
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        np.testing.assert_array_equal(f(np.ones(2)), np.ones(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")     # one warning, then eager calls in silence
        np.testing.assert_array_equal(f(-np.ones(2)), np.ones(2))


def test_fallback_restores_the_arguments_the_failed_recording_changed():
    def update_then_read(state, x):
        state["w"] += x
        if float(state["w"].sum()) > 100:
            state["w"][...] = 0
        return state["w"]

    state = {"w": np.ones(2)}
    f = mf.compile(update_then_read, fallback="eager")
    with pytest.warns(RuntimeWarning):
        f(state, np.ones(2))
    np.testing.assert_array_equal(state["w"], [2.0, 2.0])     # updated once, not twice


def test_random_draws_replay_exactly_what_the_eager_function_draws():
    def noisy(x, rng):
        return x + rng.normal(size=x.shape), rng.random(3)

    f = mf.compile(noisy)
    rng, twin = np.random.default_rng(1), np.random.default_rng(1)
    for _ in range(4):
        for got, expected in zip(f(np.zeros(5), rng), noisy(np.zeros(5), twin)):
            np.testing.assert_array_equal(got, expected)
    assert f.replays == 3


def test_recording_many_times_warns_and_names_what_changed():
    f = mf.compile(scaled_tanh, warn_after=2)
    f(np.ones(2), 1.0)
    f(np.ones(2), 2.0)
    with pytest.warns(RuntimeWarning, match=r"recorded 3 times .* changed from the value 2.0 to the value 3.0"):
        f(np.ones(2), 3.0)


def test_arrays_made_inside_are_fresh_on_every_call():
    f = mf.compile(lambda x: (x * 2, np.zeros(3)))
    first = f(np.ones(1))[1]
    first += 1
    second = f(np.ones(1))[1]
    np.testing.assert_array_equal(second, np.zeros(3))
    assert second is not first and f.replays == 1


def test_check_mode_raises_when_a_replay_differs_from_the_eager_function():
    drift = [0.0]

    @mf.operation
    def drifting(x):
        drift[0] += 1.0
        return x + drift[0]

    f = mf.compile(drifting, check=True)
    f(np.zeros(2))
    with pytest.raises(mf.ReplayMismatch, match="differs"):
        f(np.zeros(2))


def test_check_mode_compares_the_bits_so_a_signed_zero_counts():
    flip = [1.0]

    @mf.operation
    def signed_zero(x):
        flip[0] = -flip[0]
        return x * flip[0]

    f = mf.compile(signed_zero, check=True)
    f(np.zeros(1))
    with pytest.raises(mf.ReplayMismatch):
        f(np.zeros(1))


def test_the_environment_switch_turns_check_mode_on(monkeypatch):
    from minflux.runtime import settings

    monkeypatch.setattr(settings, "_values", {})      # as in a process that has read no setting yet
    monkeypatch.setenv("MINFLUX_COMPILE_CHECK", "1")
    assert mf.compile(scaled_tanh).check and not mf.compile(scaled_tanh, check=False).check
    monkeypatch.setenv("MINFLUX_COMPILE_CHECK", "junk")
    settings.unset("compile_check")
    with pytest.raises(mf.SettingError, match=r"MINFLUX_COMPILE_CHECK='junk' is not valid: it accepts 1, true"):
        mf.compile(scaled_tanh)


def test_bad_options_are_one_clear_error():
    with pytest.raises(ValueError, match="fallback must be 'error' or 'eager'"):
        mf.compile(scaled_tanh, fallback="skip")


@mf.elementwise
def _soft_sign(x, y):
    if x > 0:
        return x / (1.0 + x) + y
    return x / (1.0 - x) - y


def test_each_layout_of_an_argument_records_its_own_schedule_and_replays_to_the_bit():
    """Strides are in the guard key: a transposed, a strided, a broadcast and a reversed argument of
    the recorded shapes are recorded for their own layout and replay exactly what eager computes."""
    def body(x, y):
        return _soft_sign(x, y) * 2.0

    f = mf.compile(body, warn_after=8)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(6, 5)), rng.normal(size=(6, 5))
    wide = rng.normal(size=(6, 9))
    layouts = [(x, y), (np.ascontiguousarray(x.T).T, y), (x, wide[:, 2:7]),
               (x, np.broadcast_to(y[:1], (6, 5))), (x[::-1], y[:, ::-1])]
    for _ in range(3):
        for xs, ys in layouts:
            assert xs.shape == ys.shape == (6, 5)
            assert f(xs, ys).tobytes() == body(xs, ys).tobytes()
    np.testing.assert_allclose(f(x, y), np.where(x > 0, x / (1 + x) + y, x / (1 - x) - y) * 2.0, rtol=1e-15)
    assert f.recordings == len(layouts) and f.replays == 2 * len(layouts) + 1


def test_reverse_mode_replays_straight_code_and_refuses_branches_by_name():
    def square_plus_one(x):
        return x * x + 1.0

    def branchy(x):
        return x * 2.0 if x > 0 else -x

    def gradient_of(fn):
        return lambda x: mf.gradient(lambda y: mf.sum(mf.broadcast(fn, y, mode="reverse")), x)[0]

    step = mf.compile(gradient_of(square_plus_one))
    for x in (np.array([1.0, -2.0]), np.array([3.0, 0.5]), np.array([-1.0, 4.0])):
        np.testing.assert_array_equal(step(x), 2 * x)
    assert step.replays == 2
    with pytest.raises(mf.NotReplayable, match=r"runs branchy with mode='reverse' .*mode='auto' or 'mixed'"):
        mf.compile(gradient_of(branchy))(np.array([1.0, -2.0]))
