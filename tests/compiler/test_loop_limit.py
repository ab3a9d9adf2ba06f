"""While loops are capped: a loop that never ends is an error naming the function and the line."""
import subprocess
import sys

import numpy as np
import pytest

import minflux as mf


@pytest.fixture
def cap():
    before = mf.get_max_loop_iterations()
    mf.set_max_loop_iterations(200)
    yield 200
    mf.set_max_loop_iterations(before)


@mf.elementwise
def grows_forever(x):
    while x > 0:
        x = x * 1.0 + 1.0
    return x


def caller(x):
    y = grows_forever(x)
    n = 0
    while n < 3:
        n = n + 1
    return y * n


def counted(x, n):
    s = 0.0
    for k in range(n):
        s = s + x
    return s


@pytest.mark.parametrize("mode", ["mixed", "reverse"])
def test_an_endless_loop_is_an_error_naming_function_and_line(backend, cap, mode):
    line = grows_forever.fn.__code__.co_firstlineno + 2
    with pytest.raises(mf.LoopLimitError) as info:
        mf.gradient(lambda x: mf.sum(mf.broadcast(caller, x, mode=mode)), np.array([-1.0, 2.0, 3.0]))
    message = str(info.value)
    assert f"{__file__}:{line}:" in message and "grows_forever (inlined into caller)" in message
    assert "200 iterations on 2 of 3 element(s)" in message and "set_max_loop_iterations" in message
    assert info.value.loc == (__file__, line) and info.value.function == "grows_forever"
    with pytest.raises(mf.LoopLimitError):
        mf.broadcast(caller, np.array([2.0]), mode=mode)


@pytest.mark.parametrize("mode", ["mixed", "reverse"])
def test_loops_under_the_cap_give_the_right_values_and_gradients(backend, cap, mode):
    xs = np.array([-1.0, -2.0])
    np.testing.assert_array_equal(mf.broadcast(caller, xs, mode=mode), 3 * xs)
    g = mf.gradient(lambda x: mf.sum(mf.broadcast(caller, x, mode=mode)), xs)[0]
    np.testing.assert_array_equal(g, [3.0, 3.0])


def test_for_loops_are_bounded_by_their_range_and_not_counted(backend, cap):
    np.testing.assert_array_equal(mf.broadcast(counted, np.array([1.0]), 1000), [1000.0])


def test_changing_the_cap_recompiles(backend, cap):
    def slow(x):
        n = 0
        while n < 300:
            n = n + 1
        return x * n
    with pytest.raises(mf.LoopLimitError):
        mf.broadcast(slow, np.ones(1))
    mf.set_max_loop_iterations(300)
    np.testing.assert_array_equal(mf.broadcast(slow, np.ones(1)), [300.0])


def test_bad_caps_are_refused():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="positive integer"):
            mf.set_max_loop_iterations(bad)


def test_the_environment_sets_the_cap():
    code = "import minflux as mf; print(mf.get_max_loop_iterations())"
    env = {"MINFLUX_MAX_LOOP_ITERATIONS": "1234", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=".")
    assert out.stdout.strip() == "1234", out.stderr
    env["MINFLUX_MAX_LOOP_ITERATIONS"] = "many"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=".")
    assert out.returncode != 0 and out.stderr.strip().splitlines()[-1].endswith(
        "MINFLUX_MAX_LOOP_ITERATIONS='many' is not valid: it accepts a whole number of at least 1 (unset it "
        "for the default: 100000)")


def doubles_until_past(x, n):
    k = 0
    while True:
        k = k + 1
        if x > n:
            return x * k, k
        x = x * 2


@mf.elementwise
def halves_until_below(x):
    while True:
        if x < 1:
            return x
        x = x / 2


@pytest.mark.parametrize("mode", ["auto", "mixed", "reverse"])
def test_while_true_ending_in_return_is_accepted(backend, cap, mode):
    x = np.array([0.3, 2.0, 0.6])
    value, k = mf.broadcast(doubles_until_past, x, 1.0, mode=mode)
    np.testing.assert_allclose(value, [1.2 * 3, 2.0, 1.2 * 2], rtol=1e-15)   # x * 2**(k-1) * k
    np.testing.assert_array_equal(k, [3, 1, 2])
    g = mf.gradient(lambda t: mf.sum(mf.broadcast(doubles_until_past, t, 1.0, mode=mode)[0]), x)[0]
    np.testing.assert_allclose(g, [2.0 ** 2 * 3, 1.0, 2.0 * 2], rtol=1e-15)
    inlined = mf.broadcast(lambda x: halves_until_below(x) + 1.0, np.array([5.0, 0.5]), mode=mode)
    np.testing.assert_allclose(inlined, [5.0 / 8 + 1.0, 1.5], rtol=1e-15)


def test_while_true_that_never_returns_hits_the_cap(backend, cap):
    with pytest.raises(mf.LoopLimitError, match="doubles_until_past ran more than 200 iterations"):
        mf.broadcast(doubles_until_past, np.array([0.3, -1.0]), 1.0)
