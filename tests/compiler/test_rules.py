"""The derivative table: every primitive the core promises is present, and each partial rule agrees
with a derivative written out here by hand (and with finite differences on the scalar function)."""
from __future__ import annotations

import numpy as np
import pytest

from minflux.compiler.rules import TABLE, ArrayMath, define

m = ArrayMath(np)

DIFFERENTIABLE = ["add", "subtract", "multiply", "divide", "power", "negative", "abs", "exp", "log", "log1p",
                  "expm1", "sqrt", "tanh", "sigmoid", "relu", "softplus", "sin", "cos", "maximum", "minimum",
                  "clip", "sign", "floor", "where"]
COMPARISONS = ["less", "less_equal", "greater", "greater_equal", "equal", "not_equal"]

# name -> (points, hand-written partials per argument)
HAND = {
    "add": ([(1.5, -0.5)], [lambda a, b: 1.0, lambda a, b: 1.0]),
    "subtract": ([(1.5, -0.5)], [lambda a, b: 1.0, lambda a, b: -1.0]),
    "multiply": ([(1.5, -0.5)], [lambda a, b: b, lambda a, b: a]),
    "divide": ([(1.5, -0.5)], [lambda a, b: 1 / b, lambda a, b: -a / b ** 2]),
    "power": ([(1.5, 2.5), (0.7, -1.2)], [lambda a, b: b * a ** (b - 1), lambda a, b: a ** b * np.log(a)]),
    "negative": ([(0.3,)], [lambda x: -1.0]),
    "abs": ([(-0.3,), (0.4,)], [lambda x: np.sign(x)]),
    "exp": ([(0.3,)], [np.exp]),
    "log": ([(0.3,)], [lambda x: 1 / x]),
    "log1p": ([(0.3,)], [lambda x: 1 / (1 + x)]),
    "expm1": ([(0.3,)], [np.exp]),
    "sqrt": ([(0.3,)], [lambda x: 0.5 / np.sqrt(x)]),
    "tanh": ([(0.3,), (-2.0,)], [lambda x: 1 / np.cosh(x) ** 2]),
    "sigmoid": ([(0.3,), (-4.0,)], [lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2]),
    "relu": ([(-0.3,), (0.3,)], [lambda x: float(x > 0)]),
    "softplus": ([(0.3,), (-30.0,), (30.0,)], [lambda x: 1 / (1 + np.exp(-x))]),
    "sin": ([(0.3,)], [np.cos]),
    "cos": ([(0.3,)], [lambda x: -np.sin(x)]),
    "maximum": ([(1.0, 2.0), (2.0, 1.0)], [lambda a, b: float(a > b), lambda a, b: float(b > a)]),
    "minimum": ([(1.0, 2.0), (2.0, 1.0)], [lambda a, b: float(a < b), lambda a, b: float(b < a)]),
    "sign": ([(0.3,)], [lambda x: 0.0]),
    "floor": ([(0.3,)], [lambda x: 0.0]),
}


def evaluate(name, k, point):
    prim = TABLE[name]
    args = [np.float64(p) for p in point]
    y = prim.impl(np, *args)
    return float(prim.partials[k](m, *args, y))


def test_the_table_has_every_promised_primitive():
    for name in DIFFERENTIABLE + COMPARISONS + ["floor_divide", "mod"]:
        assert name in TABLE, name
    for name in COMPARISONS:
        assert not TABLE[name].differentiable
    assert TABLE["where"].partials[0] is None


@pytest.mark.parametrize("name", sorted(HAND))
def test_partials_match_hand_derivatives(name):
    points, derivatives = HAND[name]
    for point in points:
        for k, d in enumerate(derivatives):
            np.testing.assert_allclose(evaluate(name, k, point), d(*point), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", sorted(HAND))
def test_partials_match_finite_differences_of_the_impl(name):
    points, _ = HAND[name]
    prim = TABLE[name]
    for point in points:
        for k in range(prim.arity):
            up, down = list(point), list(point)
            up[k] += 1e-6
            down[k] -= 1e-6
            numeric = (prim.impl(np, *map(np.float64, up)) - prim.impl(np, *map(np.float64, down))) / 2e-6
            np.testing.assert_allclose(evaluate(name, k, point), numeric, rtol=1e-6, atol=1e-8)


def test_kink_conventions():
    assert evaluate("relu", 0, (0.0,)) == 0.0
    assert evaluate("abs", 0, (0.0,)) == 0.0
    assert (evaluate("maximum", 0, (1.0, 1.0)), evaluate("maximum", 1, (1.0, 1.0))) == (1.0, 0.0)
    assert (evaluate("minimum", 0, (1.0, 1.0)), evaluate("minimum", 1, (1.0, 1.0))) == (1.0, 0.0)
    assert [evaluate("clip", k, (0.0, 0.0, 1.0)) for k in range(3)] == [1.0, 0.0, 0.0]
    assert [evaluate("clip", k, (1.0, 0.0, 1.0)) for k in range(3)] == [1.0, 0.0, 0.0]
    assert [evaluate("clip", k, (2.0, 0.0, 1.0)) for k in range(3)] == [0.0, 0.0, 1.0]
    assert [evaluate("clip", k, (-1.0, 0.0, 1.0)) for k in range(3)] == [0.0, 1.0, 0.0]


def test_constant_partials_are_numbers():
    assert TABLE["add"].partials[0](m, 1.0, 2.0, 3.0) == 1
    assert isinstance(TABLE["negative"].partials[0](m, 1.0, -1.0), int)


def test_define_adds_a_rule_usable_on_arrays():
    define("cube_for_test", lambda xp, x: x * x * x, lambda m, x, y: 3 * x * x)
    try:
        assert ArrayMath(np).cube_for_test(np.array([2.0]))[0] == 8.0
    finally:
        del TABLE["cube_for_test"]
