"""softmax, log_softmax and cross_entropy: values against direct numpy formulas, stability for large
logits, gradients against finite differences and against softmax - onehot."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def np_softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((5,), -1), ((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1)], ids=str)
def test_softmax_and_log_softmax(shape, axis, rng):
    x = rng.standard_normal(shape) * 3
    np.testing.assert_allclose(mf.softmax(x, axis=axis), np_softmax(x, axis))
    np.testing.assert_allclose(mf.log_softmax(x, axis=axis), np.log(np_softmax(x, axis)))
    w = rng.standard_normal(shape)
    check_grad(lambda x: mf.sum(mf.softmax(x, axis=axis) * w), x)
    check_grad(lambda x: mf.sum(mf.log_softmax(x, axis=axis) * w), x)


def test_softmax_is_stable_for_large_logits():
    x = np.array([[1e4, 1e4 - np.log(3.0)], [-1e4, -1e4]])
    np.testing.assert_allclose(mf.softmax(x), [[0.75, 0.25], [0.5, 0.5]])
    np.testing.assert_allclose(mf.log_softmax(x)[1], [-np.log(2.0)] * 2)


def np_cross_entropy(logits, targets, axis):
    logp = np.log(np_softmax(logits, axis))
    picked = np.take_along_axis(logp, np.expand_dims(targets, axis), axis=axis)
    return -np.squeeze(picked, axis)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,axis", [((6, 5), -1), ((2, 3, 5), -1), ((5, 4), 0), ((2, 5, 3), 1), ((5,), 0)],
                         ids=str)
def test_cross_entropy(shape, axis, reduction, rng):
    logits = rng.standard_normal(shape) * 2
    tshape = shape[:axis % len(shape)] + shape[axis % len(shape) + 1:]
    targets = rng.integers(0, shape[axis], tshape)
    per = np_cross_entropy(logits, targets, axis)
    want = {"mean": per.mean(), "sum": per.sum(), "none": per}[reduction]
    np.testing.assert_allclose(mf.cross_entropy(logits, targets, reduction=reduction, axis=axis), want)
    w = rng.standard_normal(np.shape(want))
    check_grad(lambda z: mf.sum(mf.cross_entropy(z, targets, reduction=reduction, axis=axis) * w), logits)


def test_cross_entropy_gradient_is_softmax_minus_onehot(rng):
    logits = rng.standard_normal((4, 3))
    targets = np.array([0, 2, 2, 1])
    g = mf.gradient(lambda z: mf.cross_entropy(z, targets), logits)[0]
    onehot = np.eye(3)[targets]
    np.testing.assert_allclose(g, (np_softmax(logits, -1) - onehot) / 4)


def test_cross_entropy_is_one_node_and_stable(rng):
    from minflux.autograd import Tape, recording

    tape = Tape()
    with recording(tape):
        z = mf.Tensor(np.array([[1e4, 0.0], [0.0, -1e4]]), tape, tape.new_slot())
        loss = mf.cross_entropy(z, np.array([1, 0]), reduction="sum")
    assert [n.name for n in tape.nodes] == ["cross_entropy"]
    np.testing.assert_allclose(loss.value, 1e4)
    g = mf.gradient(lambda z: mf.cross_entropy(z, np.array([1, 0]), reduction="sum"),
                    np.array([[1e4, 0.0], [0.0, -1e4]]))[0]
    np.testing.assert_allclose(g, [[1.0, -1.0], [0.0, 0.0]])


def test_cross_entropy_float32(rng):
    logits = rng.standard_normal((4, 3)).astype(np.float32)
    value, (g,) = mf.withgradient(lambda z: mf.cross_entropy(z, np.array([0, 1, 2, 0])), logits)
    assert value.dtype == np.float32 and g.dtype == np.float32


def test_cross_entropy_errors():
    z = np.zeros((4, 3))
    with pytest.raises(ValueError, match=r"logits of shape \(4, 3\) need targets of shape \(4,\).*got \(3,\)"):
        mf.cross_entropy(z, np.array([0, 1, 2]))
    with pytest.raises(TypeError, match="targets must be integer class indices, got dtype float64"):
        mf.cross_entropy(z, np.zeros(4))
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 3\), got values from 0 to 3"):
        mf.cross_entropy(z, np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match="reduction must be one of"):
        mf.cross_entropy(z, np.array([0, 1, 2, 0]), reduction="avg")
