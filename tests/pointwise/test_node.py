"""The broadcast node and sum_to, the adjoint of broadcasting."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minflux as mf
from minflux.autograd import Tape, recording
from minflux.broadcasting import sum_to
from minflux.pointwise.eager import apply_primitive_now
from minflux.pointwise.node import broadcast_node


@st.composite
def broadcast_pairs(draw):
    """A target shape and a smaller shape that broadcasts to it (dropped leading axes, 1s)."""
    big = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=4)))
    lead = draw(st.integers(0, len(big)))
    small = tuple(1 if draw(st.booleans()) else n for n in big[lead:])
    return big, small


def reference_sum_to(grad, shape):
    """Add every element of ``grad`` into the element of ``shape`` it was broadcast from."""
    out = np.zeros(shape)
    lead = grad.ndim - len(shape)
    for index in itertools.product(*(range(n) for n in grad.shape)):
        source = tuple(0 if n == 1 else i for i, n in zip(index[lead:], shape))
        out[source] += grad[index]
    return out


@settings(max_examples=150, deadline=None)
@given(broadcast_pairs(), st.integers(0, 2**31 - 1))
def test_sum_to_matches_explicit_summation(pair, seed):
    big, small = pair
    grad = np.random.default_rng(seed).standard_normal(big)
    got = sum_to(grad, small)
    assert got.shape == small
    np.testing.assert_allclose(got, reference_sum_to(grad, small), atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(broadcast_pairs(), st.integers(0, 2**31 - 1))
def test_sum_to_is_the_adjoint_of_broadcast_to(pair, seed):
    big, small = pair
    rng = np.random.default_rng(seed)
    x, g = rng.standard_normal(small), rng.standard_normal(big)
    lhs = np.sum(np.broadcast_to(x, big) * g)
    rhs = np.sum(x * sum_to(g, small))
    np.testing.assert_allclose(lhs, rhs, atol=1e-10)


def test_constant_partials_are_not_materialised():
    tape = Tape()
    with recording(tape):
        x = mf.Tensor(np.ones(3), tape, tape.new_slot())
        y = apply_primitive_now("add", x, 1.0)   # run now: deferred ops record nothing until used
    node = tape.nodes[-1]
    cells = [c.cell_contents for c in node.vjp.__closure__ if isinstance(c.cell_contents, list)]
    partials = [p for terms in cells for (_, _, p, _, _) in terms]
    assert partials == [1]
    assert y.value.tolist() == [2.0, 2.0, 2.0]


def test_node_backward_formula_with_two_outputs(rng):
    """grad_x_k = sum_to(sum_m grad_y_m * dy_m/dx_k, shape_k) for outputs (x*y, x+y)."""
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(3)

    def both(a, b):
        av, bv = a.value, b.value
        return broadcast_node("mul_add", [a, b], [av * bv, av + bv],
                              {(0, 0): bv, (0, 1): av, (1, 0): 1, (1, 1): 1})

    w0, w1 = rng.standard_normal((2, 3)), rng.standard_normal((2, 3))

    def f(a, b):
        p, s = both(a, b)
        return mf.sum(p * w0 + s * w1)

    ga, gb = mf.gradient(f, a, b)
    np.testing.assert_allclose(ga, w0 * b + w1)
    np.testing.assert_allclose(gb, (w0 * a + w1).sum(0))


def test_node_with_only_some_outputs_used(rng):
    a = rng.standard_normal(3)

    def pair(a):
        return broadcast_node("pair", [a], [a.value * 2, a.value * 3], {(0, 0): 2, (1, 0): 3})

    g, = mf.gradient(lambda a: mf.sum(pair(a)[1]), a)
    np.testing.assert_array_equal(g, [3.0, 3.0, 3.0])


def test_node_casts_gradients_to_the_argument_dtype():
    g, = mf.gradient(lambda x: mf.sum(x * np.ones(2)), np.ones(2, dtype=np.float32))
    assert g.dtype == np.float32


@pytest.mark.parametrize("shape", [(), (1,), (3, 1)])
def test_sum_to_small_cases(shape):
    assert sum_to(np.ones((2, 3, 4))[..., :1], shape).shape == shape


def _fresh_double(p):
    from minflux.pointwise.node import broadcast_node

    return lambda x: broadcast_node("double", [x], [2 * x.value], {(0, 0): p}, fresh=True)


def test_gradient_of_a_sum_is_the_fresh_partial_itself():
    """The seed of the backward pass is known to be ones, so no multiply pass is made."""
    p = np.full(3, 2.0)
    (g,) = mf.gradient(lambda x: mf.sum(_fresh_double(p)(x)), np.ones(3))
    assert g is p and np.array_equal(g, [2.0, 2.0, 2.0])


def test_a_ones_array_that_is_not_the_seed_is_still_multiplied():
    p = np.full(3, 2.0)
    ones = np.broadcast_to(np.ones(1), (3,))
    (g,) = mf.gradient(lambda x: mf.sum(_fresh_double(p)(x) * ones * 3.0), np.ones(3))
    np.testing.assert_array_equal(g, [6.0, 6.0, 6.0])


def test_is_seed_broadcast_only_inside_a_backward_pass():
    from minflux.autograd import is_seed_broadcast

    assert not is_seed_broadcast(np.broadcast_to(np.ones(()), (2, 2)))
