"""Tensor: the array protocol, Python conversions, methods, and immutability under the tape."""
from __future__ import annotations

import math

import numpy as np
import pytest

import minflux as mf


def test_array_protocol_and_conversions():
    t = mf.Tensor(np.arange(6.0).reshape(2, 3))
    assert t.shape == (2, 3) and t.ndim == 2 and t.size == 6 and t.dtype == np.float64 and len(t) == 2
    assert float(mf.Tensor(np.array(2.5))) == 2.5 and int(mf.Tensor(np.array(3.0))) == 3
    assert mf.Tensor(np.array([4.0])).item() == 4.0
    assert bool(mf.Tensor(np.array(1.0))) is True
    np.testing.assert_array_equal(t.numpy(), np.arange(6.0).reshape(2, 3))
    assert "Tensor(" in repr(t) and "tracked" not in repr(t)


def test_repr_says_when_tracked():
    seen = []
    mf.gradient(lambda x: seen.append(repr(x)) or mf.sum(x), np.ones(1))
    assert "tracked" in seen[0]


def test_methods_delegate_to_ops(rng):
    x = rng.standard_normal((2, 3))
    t = mf.Tensor(x)
    np.testing.assert_array_equal(t.reshape(3, 2).value, x.reshape(3, 2))
    np.testing.assert_array_equal(t.reshape((6,)).value, x.reshape(6))
    np.testing.assert_array_equal(t.T.value, x.T)
    np.testing.assert_array_equal(t.transpose(1, 0).value, x.T)
    np.testing.assert_array_equal(t.transpose().value, x.T)
    np.testing.assert_array_equal(t[1, ::2].value, x[1, ::2])
    assert +t is t


def test_iteration_unstacks_the_first_axis():
    rows = list(mf.Tensor(np.arange(6.0).reshape(3, 2)))
    assert [r.value.tolist() for r in rows] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(TypeError, match="0-d"):
        iter(mf.Tensor(np.array(1.0)))


def test_tensors_are_hashable_by_identity():
    a, b = mf.Tensor(np.ones(1)), mf.Tensor(np.ones(1))
    assert len({a, b}) == 2
    assert isinstance(a == b, mf.Tensor)  # elementwise, like numpy


def test_setitem_is_refused_even_outside_gradient():
    t = mf.Tensor(np.zeros(2))
    with pytest.raises(TypeError, match="immutable"):
        t[0] = 1.0
    assert t.value.tolist() == [0.0, 0.0]


def test_methods_a_numpy_or_pytorch_user_types():
    from minflux.testing import check_grad

    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    t = mf.Tensor(x)
    np.testing.assert_allclose(t.exp().value, np.exp(x))
    np.testing.assert_allclose(t.clip(-0.5, 1.0).value, np.clip(x, -0.5, 1.0))
    np.testing.assert_allclose(t.var(axis=1).value, x.var(axis=1))
    assert t.astype(np.float32).dtype == np.float32
    assert int(np.asarray(t.argmax())) == int(np.argmax(x))
    assert bool(np.asarray((t > 0).any())) and not bool(np.asarray((t > 0).all()))
    def T(v):  # check_grad also evaluates on plain arrays (finite differences): give them the methods
        return v if isinstance(v, mf.Tensor) else mf.Tensor(v)

    check_grad(lambda x: mf.sum(T(x).exp() * T(x).sigmoid()) + T(x).var() + mf.sum(T(x).astype(np.float64).tanh()), x)
    check_grad(lambda x: mf.sum(T(x).clip(-0.5, 1.0) * T(x).prod(axis=0)), x)


def test_logical_operators_on_boolean_tensors():
    x = mf.Tensor(np.array([-1.0, 0.5, 2.0]))
    both = (x > 0) & (x < 1)
    either = (x < 0) | (x > 1)
    np.testing.assert_array_equal(np.asarray(both), [False, True, False])
    np.testing.assert_array_equal(np.asarray(either), [True, False, True])
    np.testing.assert_array_equal(np.asarray(~both), [True, False, True])
    np.testing.assert_array_equal(np.asarray(np.array([True, True, False]) & (x > 0)), [False, True, False])
    with pytest.raises(TypeError, match="needs boolean operands"):
        x & x
    with pytest.raises(TypeError, match="needs a boolean Tensor"):
        ~x


def test_astype_passes_the_gradient_between_floats_and_none_to_integers():
    x = np.array([1.25, 2.5])
    (g,) = mf.gradient(lambda x: mf.sum(x.astype(np.float32) * 3.0), x)
    assert g.dtype == np.float64
    np.testing.assert_array_equal(g, [3.0, 3.0])
    with pytest.raises(ValueError, match="does not depend"):
        mf.gradient(lambda x: mf.sum(x.astype(np.int64)), x)


MATH_AND_NUMPY_SCALARS = {
    "math.exp": (lambda t: t * math.exp(t), "Use mf.exp instead"),
    "math.log": (lambda t: t * math.log(t), "Use mf.log instead"),
    "math.tanh": (lambda t: t + math.tanh(t), "Use mf.tanh instead"),
    "math.fabs": (lambda t: t * math.fabs(t), "Use mf.abs instead"),
    "math.pow": (lambda t: math.pow(t, 2.0) + t, "Use mf.power instead"),
    "np.float64": (lambda t: t * np.float64(t), "Use mf.astype(t, np.float64) instead"),
    "np.float32": (lambda t: t * np.float32(t), "Use mf.astype(t, np.float32) instead"),
    "a conversion to a Python float": (lambda t: t * float("%.6f" % t), "write float(t) or t.item()"),
}


@pytest.mark.parametrize("operation", sorted(MATH_AND_NUMPY_SCALARS))
def test_math_and_numpy_scalars_of_a_tracked_tensor_name_the_minflux_function(operation):
    """They would enter the loss as constants: t * math.exp(t) would get exp(t) as its gradient."""
    f, instead = MATH_AND_NUMPY_SCALARS[operation]
    for _ in range(10):  # the same once the interpreter has specialised the call
        with pytest.raises(TypeError) as info:
            mf.gradient(lambda t: mf.sum(f(t)), np.array(1.5))
        message = str(info.value)
        assert message.startswith(operation) and instead in message and __file__ in message
        assert "float(t) or t.item()" in message and "drops the gradient" in message


def test_float_int_and_item_read_the_value_and_drop_the_gradient():
    """The documented reads: d/dx (x * c) with c = x read as a number is c, not 2x."""
    as_float = float

    def f(t):
        assert float(t) == 3.0 and int(t) == 3 and t.item() == 3.0 and as_float(t) == 3.0
        assert [float(v) for v in mf.reshape(t, (1,))] == [3.0]
        return t * float(t) + t * t.item() + t * int(t) + t * as_float(t + 1)
    for _ in range(10):  # every step of a loop, also once the interpreter has specialised the calls
        g, = mf.gradient(f, np.array(3.0))
        assert g == 3.0 + 3.0 + 3.0 + 4.0


def test_math_and_numpy_scalars_of_an_untracked_tensor_are_plain_reads():
    t = mf.Tensor(np.array(2.0))
    assert math.exp(t) == math.exp(2.0) and np.float64(t) == 2.0 and "%.1f" % t == "2.0"

    def f(x):
        assert math.exp(mf.stop_gradient(x)) == math.exp(2.0)
        with mf.no_grad():
            assert np.float64(x) == 2.0
        return mf.sum(x)
    assert mf.gradient(f, np.array(2.0))[0] == 1.0


UFUNCS = {"np.tanh": (lambda t: np.tanh(t), "mf.tanh"), "np.exp": (lambda t: np.exp(t), "mf.exp"),
          "np.absolute": (lambda t: np.absolute(t), "mf.abs"), "np.square": (lambda t: np.square(t), "mf.square"),
          "np.arctan2": (lambda t: np.arctan2(t, 1.0), "mf.atan2"),
          "np.add": (lambda t: np.add(np.ones(3), t), "mf.add")}


@pytest.mark.parametrize("operation", sorted(UFUNCS))
def test_numpy_ufuncs_on_a_tracked_tensor_name_the_minflux_function(operation):
    f, instead = UFUNCS[operation]
    with pytest.raises(TypeError) as info:
        mf.gradient(lambda t: mf.sum(f(t)), np.array([0.5, -1.0, 2.0]))
    message = str(info.value)
    assert message.startswith(operation + " was applied at") and f"Use {instead} instead" in message
    assert __file__ in message


def test_operators_between_numpy_values_and_tensors_stay_minflux_ops():
    """array + t, scalar * t, array < t and array @ t reach the Tensor's reflected methods."""
    x, w = np.array([0.5, -1.0, 2.0]), np.arange(1.0, 4.0)

    def f(t):
        mask = np.zeros(3) < t
        return mf.sum(w * t + np.float64(2.0) * t * t - np.ones(3) / (t + 3.0)) + np.ones((1, 3)) @ (t * mask)
    g, = mf.gradient(f, x)
    np.testing.assert_allclose(g, w + 4.0 * x + 1.0 / (x + 3.0) ** 2 + (x > 0), rtol=1e-12)


def test_numpy_ufuncs_on_untracked_tensors_compute_on_the_values():
    t = mf.Tensor(np.array([0.5, 1.0]))
    np.testing.assert_array_equal(np.tanh(t), np.tanh([0.5, 1.0]))
    np.testing.assert_array_equal(np.add(t, np.ones(2)), [1.5, 2.0])
    np.testing.assert_array_equal(np.add(t, 1.0, casting="same_kind"), [1.5, 2.0])  # CALL_KW from 3.13 on
    with pytest.raises(TypeError, match="immutable"):
        np.tanh(np.ones(2), out=t)
    ufuncs = [np.tanh]
    with pytest.raises(TypeError):  # a callee the call-site reader leaves unknown: numpy's own refusal
        ufuncs[0](np.ones(2), out=t)
    np.testing.assert_array_equal(t.value, [0.5, 1.0])
