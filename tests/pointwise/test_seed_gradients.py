"""A broadcast whose output gradient is the backward pass's seed (the output summed into the loss)
hands its partials out as the gradients: ``1 * p`` is ``p`` in every bit (zeros' signs, infinities and
NaNs included), so no pass over them is made, and each gradient is still an array of its own."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.pointwise import node
from tests.compiled.test_models_compiled import CALLS, bits
from tests.compiled.test_native_replay import compile_after_five_replays, native_form  # noqa: F401

MODES = ("mixed", "adjoint", "auto")


def folded_product(x0, x1, x2):
    """The arity benchmark's function at N = 3: a product of factors with a kink at 0.5."""
    return (x0 if x0 > 0.5 else -x0) * (x1 if x1 > 0.5 else -x1) * (x2 if x2 > 0.5 else -x2)


def expected_gradients(xs):
    """Each factor's sign times the product of the other factors, in float64 numpy."""
    factors = [np.where(x > 0.5, x, -x) for x in xs]
    signs = [np.where(x > 0.5, 1.0, -1.0) for x in xs]
    return [signs[k] * np.prod([f for j, f in enumerate(factors) if j != k], axis=0) for k in range(len(xs))]


def inputs(rng, dtype=np.float64, shape=(6, 40)):
    xs = [rng.uniform(-1, 1, shape).astype(dtype) for _ in range(3)]
    xs[0][0, :4] = [0.5, 0.0, -0.0, 1.0]   # the kink and both zeros
    xs[1][0, :4] = [2.0, 0.5, 3.0, -0.0]
    return xs


@pytest.mark.parametrize("mode", MODES)
def test_the_gradients_of_a_summed_broadcast_are_its_partials(mode, rng, monkeypatch):
    def no_pass(*args, **kwargs):
        raise AssertionError("a pass over the partials was made for the seed")

    monkeypatch.setattr(node, "_gradient_sums", no_pass)
    xs = inputs(rng)
    value, grads = mf.withgradient(lambda *a: mf.sum(mf.broadcast(folded_product, *a, mode=mode)), *xs)
    for g, want in zip(grads, expected_gradients(xs)):
        np.testing.assert_allclose(g, want, rtol=1e-15, atol=0)
    grads[0][...] = 7.0   # each is an array of its own
    assert not any(np.shares_memory(grads[0], g) for g in grads[1:]) and (grads[1] != 7.0).all()


def test_infinities_and_nans_in_the_partials_come_out_unchanged(rng):
    xs = inputs(rng)
    xs[2][1, :3] = [np.inf, np.nan, -np.inf]
    _, grads = mf.withgradient(lambda *a: mf.sum(mf.broadcast(folded_product, *a, mode="mixed")), *xs)
    want = expected_gradients(xs)
    for g, w in zip(grads[:2], want[:2]):   # d/dx0 and d/dx1 carry x2's inf, nan and -inf
        np.testing.assert_array_equal(g[1, :3], w[1, :3])


@pytest.mark.parametrize("mode", MODES)
def test_an_output_gradient_other_than_the_seed_multiplies_the_partials(mode, rng):
    xs = inputs(rng)
    _, grads = mf.withgradient(lambda *a: mf.mean(mf.broadcast(folded_product, *a, mode=mode)), *xs)
    for g, want in zip(grads, expected_gradients(xs)):
        np.testing.assert_allclose(g, want / want.size, rtol=1e-15, atol=0)


def test_one_array_passed_twice_gets_both_partials(rng):
    x = rng.uniform(-1, 1, (4, 9))
    _, (g,) = mf.withgradient(lambda x: mf.sum(mf.broadcast(lambda a, b: a * b, x, x, mode="mixed")), x)
    np.testing.assert_array_equal(g, x + x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_compiled_step_gives_eagers_bits_for_72_calls(dtype, rng):
    def step(*xs):
        loss, grads = mf.withgradient(lambda *a: mf.sum(mf.broadcast(folded_product, *a)), *xs)
        return (loss, *grads)

    compiled = mf.compile(step)
    for k in range(CALLS):
        xs = inputs(rng, dtype, shape=(64, 300))
        assert [bits(a) for a in compiled(*xs)] == [bits(a) for a in step(*xs)], f"call {k}"
    assert native_form(compiled) is not None
