"""Elementwise ops: every primitive against finite differences over broadcast shapes, the kink
conventions, and the behaviour of Tensors mixed with arrays and numbers."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.backend import DeviceError
from minflux.testing import check_grad

SHAPE_PAIRS = [
    ((3, 4), (3, 4)),   # same shape
    ((3, 4), ()),       # scalar
    ((), (3, 4)),
    ((3, 4), (4,)),     # row
    ((3, 1), (1, 4)),   # column times row
    ((2, 3, 4), (3, 1)),  # leading axes
    ((4,), (2, 3, 4)),
]
UNARY_SHAPES = [(), (5,), (3, 4), (2, 1, 3)]


def draw(rng, shape, domain):
    """Values of ``shape`` in a domain where the function is smooth (kinks kept >= 0.1 away), as an
    array even for ``shape == ()`` (a numpy scalar is configuration to mf.gradient, not a parameter)."""
    return np.asarray(_draw(rng, shape, domain))


def _draw(rng, shape, domain):
    if domain == "positive":
        return rng.uniform(0.5, 2.0, shape)
    if domain == "away_from_zero":
        return rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    if domain == "fractional":  # for floor / mod: keep x / b away from integers
        return rng.integers(-3, 3, shape) + rng.uniform(0.2, 0.8, shape)
    if domain == "above_minus_one":
        return rng.uniform(-0.5, 2.0, shape)
    return rng.uniform(-2.0, 2.0, shape)


UNARY = {
    "negative": "any", "abs": "away_from_zero", "sign": "away_from_zero", "floor": "fractional",
    "exp": "any", "log": "positive", "log1p": "above_minus_one", "expm1": "any", "sqrt": "positive",
    "sin": "any", "cos": "any", "tanh": "any", "sigmoid": "any", "relu": "away_from_zero",
    "softplus": "any",
}
BINARY = {
    "add": ("any", "any"), "subtract": ("any", "any"), "multiply": ("any", "any"),
    "divide": ("any", "away_from_zero"), "power": ("positive", "any"),
    "maximum": ("any", "any"), "minimum": ("any", "any"),
    "floor_divide": ("fractional", "positive"), "mod": ("fractional", "positive"),
}


def weighted_sum(y, w):
    return mf.sum(y * w)


@pytest.mark.parametrize("shape", UNARY_SHAPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradient_matches_finite_differences(name, shape, rng):
    op = getattr(mf, name)
    x = draw(rng, shape, UNARY[name])
    w = rng.standard_normal(shape)
    check_grad(lambda x: weighted_sum(op(x), w), x)


@pytest.mark.parametrize("shapes", SHAPE_PAIRS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_gradient_matches_finite_differences(name, shapes, rng):
    op = getattr(mf, name)
    da, db = BINARY[name]
    a, b = draw(rng, shapes[0], da), draw(rng, shapes[1], db)
    if name in ("floor_divide", "mod"):
        b = np.ones(shapes[1]) * 0.7 + rng.uniform(0, 0.05, shapes[1])
    w = rng.standard_normal(np.broadcast_shapes(*shapes))
    check_grad(lambda a, b: weighted_sum(op(a, b), w), a, b)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_python_number(name, rng):
    op = getattr(mf, name)
    a = draw(rng, (3, 2), BINARY[name][0])
    check_grad(lambda a: mf.sum(op(a, 1.3)), a)
    if name not in ("power", "floor_divide", "mod"):
        check_grad(lambda a: mf.sum(op(1.3, a)), a)


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 4), (), (4,)), ((2, 1, 4), (3, 1), ())],
                         ids=str)
def test_clip_gradient_in_all_arguments(shapes, rng):
    x = rng.uniform(-2, 2, shapes[0])
    lo = rng.uniform(-1.0, -0.3, shapes[1])
    hi = rng.uniform(0.3, 1.0, shapes[2])
    w = rng.standard_normal(np.broadcast_shapes(*shapes))
    check_grad(lambda x, lo, hi: weighted_sum(mf.clip(x, lo, hi), w), x, lo, hi)


@pytest.mark.parametrize("shapes", [((3, 4), (3, 4), (3, 4)), ((3, 4), (4,), ()), ((3, 1), (1, 4), (4,))],
                         ids=str)
def test_where_gradient_goes_to_the_selected_branch(shapes, rng):
    cond = rng.random(shapes[0]) > 0.5
    a, b = rng.standard_normal(shapes[1]), rng.standard_normal(shapes[2])
    w = rng.standard_normal(np.broadcast_shapes(*shapes))
    check_grad(lambda a, b: weighted_sum(mf.where(cond, a, b), w), a, b)
    ga, gb = mf.gradient(lambda a, b: mf.sum(mf.where(cond, a, b)), a, b)
    full = np.broadcast_shapes(*shapes)
    picked_a = np.broadcast_to(cond, full).astype(float)
    np.testing.assert_allclose(ga, mf.sum_to(picked_a, np.shape(a)))
    np.testing.assert_allclose(gb, mf.sum_to(1 - picked_a, np.shape(b)))


def test_composite_expression(rng):
    x, y = rng.standard_normal((4, 3)), rng.uniform(0.5, 2, (3,))

    def f(x, y):
        z = mf.tanh(x) * y - mf.sigmoid(x / y) + mf.exp(-x * x) ** 2 + mf.softplus(x) * mf.log(y)
        return mf.mean(z * z)

    check_grad(f, x, y)


# -- kinks: the table's conventions, checked against explicit values ---------------------------------

def test_relu_derivative_at_zero_is_zero():
    g = mf.gradient(lambda x: mf.sum(mf.relu(x)), np.array([-1.0, 0.0, 2.0]))[0]
    np.testing.assert_array_equal(g, [0.0, 0.0, 1.0])


def test_abs_derivative_at_zero_is_zero():
    g = mf.gradient(lambda x: mf.sum(mf.abs(x)), np.array([-1.0, 0.0, 2.0]))[0]
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_ties_send_the_gradient_to_the_first_argument(name):
    op = getattr(mf, name)
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 5.0])
    ga, gb = mf.gradient(lambda a, b: mf.sum(op(a, b)), a, b)
    first_wins = [1.0, 1.0, 0.0] if name == "maximum" else [1.0, 0.0, 1.0]
    np.testing.assert_array_equal(ga, first_wins)
    np.testing.assert_array_equal(gb, 1 - np.array(first_wins))


def test_clip_passes_the_gradient_on_the_closed_interval():
    x = np.array([-1.0, 0.0, 0.5, 1.0, 2.0])
    gx, glo, ghi = mf.gradient(lambda x, lo, hi: mf.sum(mf.clip(x, lo, hi)), x, np.array(0.0),
                               np.array(1.0))
    np.testing.assert_array_equal(gx, [0.0, 1.0, 1.0, 1.0, 0.0])
    assert float(glo) == 1.0 and float(ghi) == 1.0


def test_power_with_zero_base_has_finite_exponent_gradient():
    ga, gb = mf.gradient(lambda a, b: mf.sum(a ** b), np.array([0.0, 2.0]), np.array([2.0, 3.0]))
    np.testing.assert_allclose(ga, [0.0, 12.0])
    np.testing.assert_allclose(gb, [0.0, 8.0 * np.log(2.0)])


# -- non-differentiable results ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["less", "less_equal", "greater", "greater_equal", "equal", "not_equal"])
def test_comparisons_are_untracked_booleans(name):
    seen = {}

    def f(x):
        c = getattr(mf, name)(x, 0.5)
        seen["c"] = c
        return mf.sum(mf.where(c, x, 0.0))

    g = mf.gradient(f, np.array([0.0, 1.0]))[0]
    assert seen["c"].dtype == np.bool_ and seen["c"]._tape is None
    expected = getattr(np, name)(np.array([0.0, 1.0]), 0.5).astype(float)
    np.testing.assert_array_equal(g, expected)


def test_logical_ops_have_no_gradient():
    a, b = np.array([True, False, True]), np.array([True, True, False])
    np.testing.assert_array_equal(mf.logical_and(a, b), [True, False, False])
    np.testing.assert_array_equal(mf.logical_or(a, b), [True, True, True])
    np.testing.assert_array_equal(mf.logical_not(a), [False, True, False])

    def f(x):
        keep = mf.logical_and(x > 0.0, mf.logical_not(x > 1.5))
        assert keep._tape is None
        return mf.sum(mf.where(mf.logical_or(keep, x < -1.5), x * x, 0.0))

    g, = mf.gradient(f, np.array([-2.0, -1.0, 0.5, 2.0]))
    np.testing.assert_array_equal(g, [-4.0, 0.0, 1.0, 0.0])


def test_operators_match_numpy(rng):
    a, b = rng.uniform(0.5, 2, (3,)), rng.uniform(0.5, 2, (3,))
    t, u = mf.Tensor(a), mf.Tensor(b)
    for got, want in [(t + u, a + b), (t - u, a - b), (t * u, a * b), (t / u, a / b), (t ** u, a ** b),
                      (-t, -a), (abs(-t), a), (t // u, a // b), (t % u, a % b), (t < u, a < b),
                      (t >= u, a >= b), (t == u, a == b), (t != u, a != b), (2 - t, 2 - a),
                      (2 / t, 2 / a), (2 ** t, 2 ** a)]:
        np.testing.assert_allclose(np.asarray(got), want)


def test_ndarray_plus_tensor_returns_a_tensor():
    t = mf.Tensor(np.ones(2))
    for out in (np.ones(2) + t, np.ones(2) * t, np.ones(2) - t, np.float64(2.0) * t):
        assert isinstance(out, mf.Tensor)
    g = mf.gradient(lambda x: mf.sum(np.array([2.0, 3.0]) * x + np.ones(2)), np.ones(2))[0]
    np.testing.assert_array_equal(g, [2.0, 3.0])


def test_np_asarray_of_a_tensor_gives_its_value():
    t = mf.Tensor(np.arange(3.0))
    np.testing.assert_array_equal(np.asarray(t), [0.0, 1.0, 2.0])
    assert np.asarray(t, dtype=np.float32).dtype == np.float32


def test_setitem_on_a_tensor_points_to_where_and_concatenate():
    def f(x):
        x[0] = 1.0
        return mf.sum(x)

    with pytest.raises(TypeError, match=r"mf\.where.*mf\.concatenate"):
        mf.gradient(f, np.zeros(2))


def test_shape_mismatch_names_the_op_and_both_shapes():
    with pytest.raises(ValueError, match=r"mf\.add.*\(3,\) and \(4,\)"):
        mf.add(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match=r"mf\.multiply.*\(2, 3\) and \(2,\)"):
        mf.gradient(lambda x: mf.sum(x * np.ones(2)), np.ones((2, 3)))


def test_wrong_number_of_arguments():
    from minflux.pointwise.primitives import apply_primitive

    with pytest.raises(TypeError, match="mf.tanh takes 1 arguments, got 2"):
        apply_primitive("tanh", 1.0, 2.0)


def test_untracked_inputs_give_plain_arrays():
    out = mf.tanh(np.zeros(2))
    assert type(out) is np.ndarray
    assert isinstance(mf.tanh(mf.Tensor(np.zeros(2))), mf.Tensor)


def test_float32_stays_float32(rng):
    x = rng.standard_normal((3, 2)).astype(np.float32)
    b = rng.standard_normal(2)  # float64 bias: result promotes, gradient of x keeps x's dtype
    gx, gb = mf.gradient(lambda x, b: mf.sum(mf.tanh(x * 2.0) + b), x, b)
    assert gx.dtype == np.float32 and gb.dtype == np.float64
    y = mf.sigmoid(x) * 3.0 + 1
    assert y.dtype == np.float32


def test_mixed_numpy_and_cupy_error_names_the_op(fake_cupy):
    on_gpu = fake_cupy.asarray(np.ones(2))
    with pytest.raises(DeviceError, match=r"mf\.multiply.*numpy\.ndarray.*cupy\.ndarray.*to_device"):
        mf.multiply(np.ones(2), on_gpu)
    with pytest.raises(DeviceError, match=r"mf\.matmul"):
        mf.gradient(lambda w: mf.sum(w @ on_gpu), np.ones((2, 2)))
