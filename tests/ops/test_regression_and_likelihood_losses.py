"""mse, binary_cross_entropy_with_logits, nll and kl_divergence: independent formulas and
finite-difference gradients, extreme logits, and the refusal of arguments whose shapes differ."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

REDUCE = {"mean": np.mean, "sum": np.sum, "none": lambda a: a}


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 1, 3), ()], ids=str)
def test_mse(shape, reduction, rng):
    p, t = rng.standard_normal(shape), rng.standard_normal(shape)
    want = REDUCE[reduction]((p - t) ** 2)
    np.testing.assert_allclose(mf.mse(p, t, reduction), want, rtol=1e-12)
    w = rng.standard_normal(np.shape(want))
    check_grad(lambda p, t: mf.sum(mf.mse(p, t, reduction) * w), p, t)


LOSSES = {"mse": (mf.mse, "predictions", "targets"),
          "binary_cross_entropy_with_logits": (mf.binary_cross_entropy_with_logits, "logits", "targets"),
          "kl_divergence": (mf.kl_divergence, "log_q", "p")}


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("first,second", [((4, 1), (4,)), ((4,), (4, 1)), ((3, 4), (4,)), ((2, 3), ())],
                         ids=str)
def test_elementwise_losses_refuse_shapes_that_differ(name, first, second):
    """mse of a (4, 1) prediction against a (4,) target would average the (4, 4) differences."""
    loss, a, b = LOSSES[name]
    message = (f"mf.{name}: {a} of shape {first} and {b} of shape {second} differ; an elementwise loss "
               f"needs equal shapes (reshape one, or broadcast on purpose with mf.broadcast_to({b}, {first}))")
    with pytest.raises(ValueError) as info:
        loss(np.full(first, 0.5), np.full(second, 0.5))
    assert str(info.value) == message
    with pytest.raises(ValueError, match="differ"):  # inside a gradient too, on a deferred value
        mf.gradient(lambda x: loss(x * 2.0, np.full(second, 0.5)), np.full(first, 0.25))


def test_explicit_broadcast_gives_the_elementwise_loss(rng):
    p, t = rng.standard_normal((3, 4)), rng.standard_normal(4)
    np.testing.assert_allclose(mf.mse(p, mf.broadcast_to(t, (3, 4))), np.mean((p - t) ** 2), rtol=1e-12)
    assert float(mf.mse(np.arange(4.0)[:, None], np.arange(4.0)[:, None])) == 0.0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy_with_logits(reduction, rng):
    z = rng.standard_normal((3, 4)) * 3
    t = rng.uniform(0, 1, (3, 4))
    prob = 1 / (1 + np.exp(-z))
    want = REDUCE[reduction](-(t * np.log(prob) + (1 - t) * np.log(1 - prob)))
    np.testing.assert_allclose(mf.binary_cross_entropy_with_logits(z, t, reduction), want, rtol=1e-10)
    w = rng.standard_normal(np.shape(want))
    check_grad(lambda z, t: mf.sum(mf.binary_cross_entropy_with_logits(z, t, reduction) * w), z, t)


def test_binary_cross_entropy_is_exact_for_huge_logits():
    z = np.array([800.0, -800.0, 800.0])
    t = np.array([1.0, 0.0, 0.0])
    got = mf.binary_cross_entropy_with_logits(z, t, "none")
    np.testing.assert_allclose(got, [0.0, 0.0, 800.0])
    g, = mf.gradient(lambda z: mf.binary_cross_entropy_with_logits(z, t, "sum"), z)
    np.testing.assert_allclose(g, [0.0, 0.0, 1.0])   # sigmoid(z) - t


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,axis", [((5, 3), -1), ((2, 4, 3), -1), ((3, 5), 0)], ids=str)
def test_nll_against_log_softmax_and_cross_entropy(shape, axis, reduction, rng):
    logits = rng.standard_normal(shape)
    log_probs = mf.log_softmax(logits, axis=axis)
    targets = rng.integers(0, shape[axis], tuple(n for i, n in enumerate(shape) if i != axis % len(shape)))
    picked = np.take_along_axis(log_probs, np.expand_dims(targets, axis), axis=axis).squeeze(axis)
    np.testing.assert_allclose(mf.nll(log_probs, targets, reduction, axis=axis), REDUCE[reduction](-picked),
                               rtol=1e-12)
    np.testing.assert_allclose(mf.nll(log_probs, targets, reduction, axis=axis),
                               mf.cross_entropy(logits, targets, reduction, axis=axis), rtol=1e-12)
    w = rng.standard_normal(np.shape(REDUCE[reduction](picked)))
    check_grad(lambda lp: mf.sum(mf.nll(lp, targets, reduction, axis=axis) * w), np.asarray(log_probs))


def test_nll_checks_targets():
    lp = np.zeros((2, 3))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        mf.nll(lp, np.array([0, 3]))
    with pytest.raises(ValueError, match="need targets of shape"):
        mf.nll(lp, np.array([0, 1, 2]))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_kl_divergence(reduction, rng):
    p = rng.dirichlet(np.ones(4), size=3)
    p[0, 1] = 0.0
    p[0] /= p[0].sum()
    q = rng.dirichlet(np.ones(4), size=3)
    per_row = np.array([sum(pi * np.log(pi / qi) for pi, qi in zip(pr, qr) if pi > 0) for pr, qr in zip(p, q)])
    want = {"mean": per_row.mean(), "sum": per_row.sum(), "none": per_row}[reduction]
    np.testing.assert_allclose(mf.kl_divergence(np.log(q), p, reduction), want, rtol=1e-12)
    w = rng.standard_normal(np.shape(want))
    check_grad(lambda lq: mf.sum(mf.kl_divergence(lq, p, reduction) * w), np.log(q))


def test_kl_divergence_of_equal_distributions_is_zero_and_ignores_minus_inf_where_p_is_zero():
    p = np.array([0.5, 0.5, 0.0])
    with np.errstate(divide="ignore"):
        log_q = np.log(np.array([0.5, 0.5, 0.0]))
    assert float(mf.kl_divergence(log_q, p)) == 0.0
    g, = mf.gradient(lambda lq: mf.kl_divergence(lq, p), log_q)
    np.testing.assert_array_equal(g, [-0.5, -0.5, 0.0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_losses_keep_the_dtype(dtype):
    x = np.full((2, 3), 0.25, dtype)
    t = np.array([0, 2])
    for loss in (mf.mse(x, x * 2), mf.binary_cross_entropy_with_logits(x, x), mf.nll(x, t),
                 mf.kl_divergence(x, x)):
        assert loss.dtype == dtype
