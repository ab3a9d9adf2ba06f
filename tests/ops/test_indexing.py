"""Indexing and take: values against numpy; gradients against finite differences and against
explicit scatter-adds (np.add.at) for repeated indices; many slices accumulate into one buffer."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.autograd import IndexedGrad
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

INDICES = [
    ("int", 1), ("negative_int", -1), ("slice", slice(1, 3)), ("step", slice(None, None, -2)),
    ("tuple", (1, slice(0, 2))), ("ellipsis", (Ellipsis, 0)), ("newaxis", (None, 1)),
    ("int_array", np.array([0, 2, 0, 3])), ("list", [3, 3, 1]),
    ("two_arrays", (np.array([0, 1, 1]), np.array([2, 2, 2]))),
    ("array_and_slice", (slice(None), np.array([[0, 0], [4, 1]]))),
    ("bool_mask", np.array([True, False, True, False])),
]


@pytest.mark.parametrize("name,index", INDICES, ids=[i[0] for i in INDICES])
def test_getitem_value_and_gradient(name, index, rng):
    x = rng.standard_normal((4, 5))
    np.testing.assert_array_equal(mf.getitem(x, index), x[index])
    w = rng.standard_normal(np.shape(x[index]))
    check_grad(lambda x: mf.sum(x[index] * w), x)
    g = mf.gradient(lambda x: mf.sum(x[index] * w), x)[0]
    expected = np.zeros_like(x)
    np.add.at(expected, index if not isinstance(index, list) else np.array(index), w)
    np.testing.assert_allclose(g, expected)


def test_tensor_index_is_used_as_its_value():
    x = np.arange(5.0)
    np.testing.assert_array_equal(mf.getitem(x, mf.Tensor(np.array([4, 0]))), [4.0, 0.0])


def test_time_loop_slices_accumulate_into_one_buffer():
    """``x[t]`` per step hands the tape small indexed gradients, not full-size zero arrays."""
    captured = []

    def f(x):
        total = 0.0
        for t in range(x.shape[0]):
            total = total + mf.sum(x[t] * (t + 1))
        return total

    original = IndexedGrad.__init__

    def spy(self, shape, dtype, index, values, unique):
        captured.append(np.shape(values))
        original(self, shape, dtype, index, values, unique)

    IndexedGrad.__init__ = spy
    try:
        g = mf.gradient(f, np.zeros((6, 3)))[0]
    finally:
        IndexedGrad.__init__ = original
    np.testing.assert_array_equal(g, np.arange(1, 7)[:, None] * np.ones((1, 3)))
    assert captured == [(3,)] * 6


@pytest.mark.parametrize("axis", [0, 1, -1, None])
def test_take_value_and_gradient(axis, rng):
    x = rng.standard_normal((5, 4))
    idx = np.array([[0, 3, 3], [1, 0, 3]])
    np.testing.assert_array_equal(mf.take(x, idx, axis=axis), np.take(x, idx, axis=axis))
    w = rng.standard_normal(np.take(x, idx, axis=axis).shape)
    check_grad(lambda x: mf.sum(mf.take(x, idx, axis=axis) * w), x)


def test_take_scatter_adds_repeated_rows(rng):
    table = rng.standard_normal((6, 3)).astype(np.float32)
    ids = rng.integers(0, 6, (7, 5))
    w = rng.standard_normal((7, 5, 3)).astype(np.float32)
    g = mf.gradient(lambda t: mf.sum(mf.take(t, ids, axis=0) * w), table)[0]
    expected = np.zeros((6, 3), np.float32)
    for i, row in enumerate(ids.reshape(-1)):
        expected[row] += w.reshape(-1, 3)[i]
    np.testing.assert_allclose(g, expected, rtol=1e-5, atol=1e-6)
    assert g.dtype == np.float32


def test_take_accumulates_across_calls():
    table = np.zeros((4, 2))
    g = mf.gradient(lambda t: sum(mf.sum(mf.take(t, np.array([1, 1, 3]), axis=0)) for _ in range(3)), table)[0]
    np.testing.assert_array_equal(g, [[0, 0], [6, 6], [0, 0], [3, 3]])


def test_take_negative_indices_add_into_the_same_row():
    g = mf.gradient(lambda t: mf.sum(mf.take(t, np.array([-1, 2, 0]), axis=0)), np.zeros((3, 1)))[0]
    np.testing.assert_array_equal(g, [[1], [0], [2]])


def test_take_errors():
    with pytest.raises(TypeError, match=r"mf\.take: indices must be integers, got dtype float64"):
        mf.take(np.ones((3, 2)), np.array([0.0]), axis=0)
    with pytest.raises(IndexError, match=r"mf\.take: .*out of bounds"):
        mf.take(np.ones((3, 2)), np.array([5]), axis=0)
    with pytest.raises(IndexError, match=r"shape \(3,\)"):
        mf.getitem(np.ones(3), 7)


@pytest.mark.parametrize("index", [np.array([3, 0]), slice(1, 3), np.array([True, False, True, False])],
                         ids=["integers", "slice", "mask"])
def test_index_set_values_and_gradients(index, rng):
    x, weights = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    values = rng.standard_normal(np.zeros((4, 3))[index].shape)
    expected = x.copy()
    expected[index] = values
    np.testing.assert_array_equal(mf.index_set(x, index, values), expected)
    check_grad(lambda x, v: mf.sum(mf.index_set(x, index, v) * weights), x, values)
    g_x, g_values = mf.gradient(lambda x, v: mf.sum(mf.index_set(x, index, v) * weights), x, values)
    outside = np.ones((4, 3), bool)
    outside[index] = False
    np.testing.assert_array_equal(g_x, np.where(outside, weights, 0.0))
    np.testing.assert_array_equal(g_values, weights[index])


def test_index_set_broadcasts_values_and_refuses_repeated_positions():
    g, = mf.gradient(lambda v: mf.sum(mf.index_set(np.zeros((3, 2)), np.array([0, 2]), v)), np.ones(2))
    np.testing.assert_array_equal(g, [2.0, 2.0])
    with pytest.raises(ValueError, match="without repeated positions"):
        mf.index_set(np.zeros(3), np.array([1, 1]), np.ones(2))


@pytest.mark.parametrize("index", [[-1, 2], [2, -1], [0, -3], [-2, -2]], ids=str)
def test_index_set_refuses_a_negative_index_aliasing_another(index):
    """x[-1] and x[n-1] are one position: the value would keep only the last write while both written
    values got the gradient."""
    with pytest.raises(ValueError, match="without repeated positions"):
        mf.index_set(np.zeros(3), np.array(index), np.array([1.0, 2.0]))


def test_index_set_negative_indices_without_aliases_get_their_own_gradient():
    weights = np.array([1.0, 2.0, 3.0, 4.0])
    index = np.array([-1, 0])
    g_x, g_v = mf.gradient(lambda x, v: mf.sum(mf.index_set(x, index, v) * weights),
                           np.zeros(4), np.array([5.0, 6.0]))
    np.testing.assert_array_equal(g_v, [4.0, 1.0])
    np.testing.assert_array_equal(g_x, [0.0, 2.0, 3.0, 0.0])


@pytest.mark.parametrize("index", [np.array([0, 2, 3]), np.array([-3, 2]), np.array([3, 1, 3])], ids=str)
def test_integer_rows_picked_in_any_order_get_every_contribution(index):
    """An increasing index takes the assignment path; a negative alias of a later position, or a
    repeat, must still add up."""
    g, = mf.gradient(lambda x: mf.sum(x[index] * np.arange(1.0, index.size + 1)[:, None]), np.zeros((5, 2)))
    expected = np.zeros((5, 2))
    np.add.at(expected, index, np.arange(1.0, index.size + 1)[:, None] * np.ones((1, 2)))
    np.testing.assert_array_equal(g, expected)
