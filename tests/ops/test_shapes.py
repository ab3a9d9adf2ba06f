"""Shape ops, joining and splitting: values against numpy, gradients against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


UNARY_CASES = [
    ("reshape", (2, 6), lambda x: mf.reshape(x, (3, -1)), lambda x: x.reshape(3, -1)),
    ("reshape_method", (2, 6), lambda x: x.reshape(4, 3), lambda x: x.reshape(4, 3)),
    ("transpose", (2, 3), mf.transpose, np.transpose),
    ("transpose_axes", (2, 3, 4), lambda x: mf.transpose(x, (2, 0, 1)), lambda x: np.transpose(x, (2, 0, 1))),
    ("transpose_negative", (2, 3, 4), lambda x: mf.transpose(x, (-1, 0, 1)),
     lambda x: np.transpose(x, (2, 0, 1))),
    ("T", (2, 3), lambda x: x.T, lambda x: x.T),
    ("swapaxes", (2, 3, 4), lambda x: mf.swapaxes(x, 0, -1), lambda x: np.swapaxes(x, 0, -1)),
    ("expand_dims", (2, 3), lambda x: mf.expand_dims(x, 1), lambda x: np.expand_dims(x, 1)),
    ("expand_dims_tuple", (2, 3), lambda x: mf.expand_dims(x, (0, -1)), lambda x: np.expand_dims(x, (0, -1))),
    ("squeeze", (2, 1, 3, 1), mf.squeeze, np.squeeze),
    ("squeeze_axis", (2, 1, 3, 1), lambda x: mf.squeeze(x, -1), lambda x: np.squeeze(x, -1)),
    ("broadcast_to_rows", (3,), lambda x: mf.broadcast_to(x, (4, 3)), lambda x: np.broadcast_to(x, (4, 3))),
    ("broadcast_to_column", (4, 1), lambda x: mf.broadcast_to(x, (2, 4, 3)),
     lambda x: np.broadcast_to(x, (2, 4, 3))),
    ("broadcast_to_scalar", (), lambda x: mf.broadcast_to(x, (2, 2)), lambda x: np.broadcast_to(x, (2, 2))),
]


@pytest.mark.parametrize("name,shape,op,reference", UNARY_CASES, ids=[c[0] for c in UNARY_CASES])
def test_shape_op_value_and_gradient(name, shape, op, reference, rng):
    x = rng.standard_normal(shape)
    if name in ("reshape_method", "T"):
        np.testing.assert_array_equal(op(mf.Tensor(x)).value, reference(x))
    else:
        np.testing.assert_array_equal(op(x), reference(x))
    w = rng.standard_normal(np.shape(reference(x)))
    check_grad(lambda x: mf.sum(op(x) * w), x)


def test_broadcast_to_gradient_sums_the_copies():
    g = mf.gradient(lambda x: mf.sum(mf.broadcast_to(x, (5, 2, 3))), np.ones((2, 1)))[0]
    np.testing.assert_array_equal(g, np.full((2, 1), 15.0))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concatenate(axis, rng):
    shapes = [(2, 3), (2, 3), (2, 3)]
    shapes = [tuple(n + k if i == axis % 2 else n for i, n in enumerate(s)) for k, s in enumerate(shapes)]
    xs = [rng.standard_normal(s) for s in shapes]
    np.testing.assert_array_equal(mf.concatenate(xs, axis=axis), np.concatenate(xs, axis=axis))
    w = rng.standard_normal(np.concatenate(xs, axis=axis).shape)
    check_grad(lambda a, b, c: mf.sum(mf.concatenate([a, b, c], axis=axis) * w), *xs)


def test_concatenate_with_constants_and_unused_parts(rng):
    a, c = rng.standard_normal((2, 2)), rng.standard_normal((1, 2))
    ga, = mf.gradient(lambda a: mf.sum(mf.concatenate([a, c])[:2] * 3.0), a)
    np.testing.assert_array_equal(ga, np.full((2, 2), 3.0))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_stack(axis, rng):
    xs = [rng.standard_normal((2, 3)) for _ in range(4)]
    np.testing.assert_array_equal(mf.stack(xs, axis=axis), np.stack(xs, axis=axis))
    w = rng.standard_normal(np.stack(xs, axis=axis).shape)
    check_grad(lambda *xs: mf.sum(mf.stack(list(xs), axis=axis) * w), *xs)


@pytest.mark.parametrize("sections,axis", [(3, 0), ([1, 4], 0), (2, 1), ([2], -1), (np.int64(2), 0),
                                           ([4, 1], 0), ([-2, 5, 9], 0), ([], 1)])
def test_split(sections, axis, rng):
    x = rng.standard_normal((6, 4))
    parts = mf.split(x, sections, axis=axis)
    want = np.split(x, sections, axis=axis)
    assert len(parts) == len(want)
    for p, q in zip(parts, want):
        np.testing.assert_array_equal(p, q)
    ws = [rng.standard_normal(q.shape) for q in want]
    check_grad(lambda x: sum(mf.sum(p * w) for p, w in zip(mf.split(x, sections, axis=axis), ws)), x)


def test_split_gradient_fills_zeros_only_for_unused_parts():
    g = mf.gradient(lambda x: mf.sum(mf.split(x, 3)[1] * 2.0), np.ones(6))[0]
    np.testing.assert_array_equal(g, [0, 0, 2, 2, 0, 0])


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_unstack(axis, rng):
    x = rng.standard_normal((3, 4, 2))
    parts = mf.unstack(x, axis=axis)
    want = [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
    assert len(parts) == len(want)
    for p, q in zip(parts, want):
        np.testing.assert_array_equal(p, q)
    ws = [rng.standard_normal(q.shape) for q in want]
    check_grad(lambda x: sum(mf.sum(p * w) for p, w in zip(mf.unstack(x, axis=axis), ws)), x)


def test_unstack_gradient_with_missing_steps():
    def f(x):
        steps = mf.unstack(x)
        return mf.sum(steps[0] * 1.0 + steps[2] * 3.0)

    g = mf.gradient(f, np.ones((4, 2)))[0]
    np.testing.assert_array_equal(g, [[1, 1], [0, 0], [3, 3], [0, 0]])


def test_iterating_a_tensor_is_one_unstack_node():
    from minflux.autograd import Tape, recording

    tape = Tape()
    with recording(tape):
        x = mf.Tensor(np.ones((5, 2)), tape, tape.new_slot())
        steps = list(x)
    assert len(steps) == 5 and [n.name for n in tape.nodes] == ["unstack"]
    g = mf.gradient(lambda x: sum(mf.sum(s) * k for k, s in enumerate(x)), np.ones((3, 2)))[0]
    np.testing.assert_array_equal(g, [[0, 0], [1, 1], [2, 2]])


def test_shape_errors_name_the_op_and_shapes():
    with pytest.raises(ValueError, match=r"mf\.reshape: cannot reshape an array of shape \(2, 3\) "
                                         r"\(6 elements\) into shape \(4,\)"):
        mf.reshape(np.ones((2, 3)), (4,))
    with pytest.raises(ValueError, match=r"mf\.broadcast_to: cannot broadcast shape \(2, 3\) to \(4, 3\)"):
        mf.broadcast_to(np.ones((2, 3)), (4, 3))
    with pytest.raises(ValueError, match=r"mf\.concatenate: shapes \[\(2, 3\), \(2, 4\)\] differ"):
        mf.concatenate([np.ones((2, 3)), np.ones((2, 4))])
    with pytest.raises(ValueError, match=r"mf\.stack: .*\[\(2,\), \(3,\)\]"):
        mf.stack([np.ones(2), np.ones(3)])
    with pytest.raises(ValueError, match=r"mf\.split: .*length 5.*3 equal sections"):
        mf.split(np.ones(5), 3)
    with pytest.raises(ValueError, match=r"mf\.split: the number of sections must be positive, got 0"):
        mf.split(np.ones(5), 0)
    with pytest.raises(ValueError, match=r"mf\.squeeze: axis 0 of shape \(2, 1\) has length 2"):
        mf.squeeze(np.ones((2, 1)), 0)
    with pytest.raises(ValueError, match=r"mf\.transpose: axes \(0, 0\)"):
        mf.transpose(np.ones((2, 1)), (0, 0))
    with pytest.raises(TypeError, match=r"mf\.concatenate takes a non-empty list"):
        mf.concatenate([])
