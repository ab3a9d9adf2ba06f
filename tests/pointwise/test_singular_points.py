"""Every mode and backend agrees at singular points: a zero factor annihilates (0 * inf = 0), x ** 0
has derivative 0, hypot and atan2 have zero partials at the origin (conventions of compiler.rules)."""
import math

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

from minflux.pointwise.functions import _MODES as MODES


def grads(fn, *args, mode):
    # the zero term keeps the loss on the tape where the result does not depend on the arguments
    return mf.gradient(lambda x, *rest: mf.sum(mf.broadcast(fn, x, *rest, mode=mode)) + 0.0 * mf.sum(x),
                       *args)


def zero_trip_sqrt(x1, n0):
    c = 0
    for k in range(n0):
        c = x1
    return c ** 0.5


def branch_local_log(x):
    if x > 1:
        y = x
    return mf.log(y)


def power(x, k):
    return x ** k


def hypot_same(v):
    return math.hypot(v, v)


def hypot_constant(u):
    return math.hypot(False, math.floor(u))


def atan2_square(x1):
    return math.atan2(x1, x1 * x1)


def relu_of_sqrt(x):
    return mf.relu(mf.sqrt(x) - 1.0) + 0 * mf.sqrt(x)


@pytest.mark.parametrize("mode", MODES)
def test_a_loop_that_never_ran_contributes_nothing(backend, mode):
    if mode == "adjoint":
        pytest.skip("the element-local adjoint differentiates loop-free functions only")
    g = grads(zero_trip_sqrt, np.array([2.0, 0.0]), np.array([0, 0]), mode=mode)[0]
    np.testing.assert_array_equal(g, [0.0, 0.0])
    g = grads(zero_trip_sqrt, np.array([4.0]), np.array([1]), mode=mode)[0]
    np.testing.assert_allclose(g, [0.25])


@pytest.mark.parametrize("mode", MODES)
def test_a_branch_local_variable_leaks_no_nan(backend, mode):
    g = grads(branch_local_log, np.array([0.5, 2.0]), mode=mode)[0]
    np.testing.assert_array_equal(g, [0.0, 0.5])


@pytest.mark.parametrize("mode", MODES)
def test_integer_power_zero_at_zero(backend, mode):
    g = grads(power, np.array([0.0, 2.0, 0.0]), np.array([0, 0, 2]), mode=mode)[0]
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(mf.gradient(lambda x: mf.sum(x ** 0), np.zeros(2))[0], [0.0, 0.0])
    g = grads(power, np.array([0.0, 3.0]), np.array([1, 3]), mode=mode)[0]
    np.testing.assert_allclose(g, [1.0, 27.0])


@pytest.mark.parametrize("mode", MODES)
def test_hypot_at_the_origin(backend, mode):
    np.testing.assert_array_equal(grads(hypot_same, np.array([0.0]), mode=mode)[0], [0.0])
    g = grads(hypot_same, np.array([3.0, -3.0]), mode=mode)[0]
    np.testing.assert_allclose(g, [math.sqrt(2), -math.sqrt(2)])
    g = grads(hypot_constant, np.array([0.5, 1.5]), mode=mode)[0]
    assert g is None or np.array_equal(g, [0.0, 0.0])
    ga, gb = mf.gradient(lambda a, b: mf.sum(mf.hypot(a, b)), np.zeros(1), np.zeros(1))
    np.testing.assert_array_equal(np.concatenate([ga, gb]), [0.0, 0.0])


@pytest.mark.parametrize("mode", MODES)
def test_atan2_agrees_with_finite_differences(backend, mode):
    check_grad(lambda x: mf.sum(mf.broadcast(atan2_square, x, mode=mode)), np.array([2.7, -0.4]))
    ga, gb = mf.gradient(lambda a, b: mf.sum(mf.atan2(a, b)), np.zeros(1), np.zeros(1))
    np.testing.assert_array_equal(np.concatenate([ga, gb]), [0.0, 0.0])


@pytest.mark.parametrize("mode", MODES)
def test_zero_rule_after_an_infinite_one_is_zero(backend, mode):
    # relu'(-1) = 0 meets sqrt'(0) = inf on the lane x = 0, whichever way the product is formed
    g = grads(relu_of_sqrt, np.array([0.0, 4.0]), mode=mode)[0]
    np.testing.assert_array_equal(g, [0.0, 0.25])


def test_tape_products_annihilate_across_nodes():
    # a where-node (zero partial) below a log node (infinite partial): 0, not nan
    def loss(x):
        y = mf.where(x > 1, x, 0.0)
        return mf.sum(mf.log(y))
    np.testing.assert_array_equal(mf.gradient(loss, np.array([0.5, 2.0]))[0], [0.0, 0.5])
    # an infinite partial with a nonzero cotangent stays infinite: the true derivative
    g = mf.gradient(lambda x: mf.sum(mf.sqrt(x)), np.array([0.0]))[0]
    assert g[0] == np.inf


def test_nan_inputs_still_give_nan_gradients():
    g = mf.gradient(lambda x: mf.sum(mf.tanh(x) * 2.0), np.array([np.nan, 0.0]))[0]
    assert np.isnan(g[0]) and g[1] == 2.0
