"""Tensor: the array protocol, Python conversions, methods, and immutability under the tape."""
from __future__ import annotations

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
