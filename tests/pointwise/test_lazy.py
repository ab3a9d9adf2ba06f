"""Deferred elementwise values: ordinary expressions fuse into one kernel, with the same values,
gradients, shapes, dtypes and errors as op-by-op evaluation."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad


@pytest.fixture
def fuse_at_once():
    old = mf.set_fusion(enabled=True, compile_after=1, min_elements=1)
    mf.fusion_stats(reset=True)
    yield
    mf.set_fusion(**old)


def test_three_ops_inside_gradient_launch_one_kernel(fuse_at_once, rng):
    x, y, z = rng.standard_normal((3, 5, 4))
    grads = mf.gradient(lambda x, y, z: mf.sum(x * y + mf.tanh(z)), x, y, z)
    stats = mf.fusion_stats()
    assert (stats["fused_launches"], stats["fused_ops"], stats["op_by_op"]) == (1, 3, 0)
    np.testing.assert_allclose(grads[0], y, rtol=1e-12)
    np.testing.assert_allclose(grads[1], x, rtol=1e-12)
    np.testing.assert_allclose(grads[2], 1 - np.tanh(z) ** 2, rtol=1e-12)
    check_grad(lambda x, y, z: mf.sum(x * y + mf.tanh(z)), x, y, z)   # float64 finite differences


def test_a_new_structure_runs_op_by_op_until_it_is_seen_again(rng):
    old = mf.set_fusion(enabled=True, compile_after=2, min_elements=1)
    try:
        mf.fusion_stats(reset=True)
        x = rng.standard_normal(6)

        def loss(x):
            return mf.sum(mf.sigmoid(x * 1.25 - 0.125) * x)   # constants unique to this test

        first = mf.gradient(loss, x)[0]
        assert mf.fusion_stats()["fused_launches"] == 0 and mf.fusion_stats()["op_by_op"] == 4
        second = mf.gradient(loss, x)[0]
        assert mf.fusion_stats()["fused_launches"] == 1
        np.testing.assert_allclose(first, second, rtol=1e-13)
    finally:
        mf.set_fusion(**old)


def test_shape_and_dtype_are_known_before_computing_and_errors_point_at_the_line(fuse_at_once):
    def f(x):
        y = x * 2.0 + 1.0
        assert y.is_deferred and y.shape == (3, 4) and y.dtype == np.float32
        assert (y > 0).dtype == np.bool_ and (y > 0).shape == (3, 4)
        with pytest.raises(ValueError, match=r"mf.add: cannot broadcast shapes \(3, 4\) and \(5,\)"):
            y + np.ones(5, np.float32)
        return mf.sum(y)

    mf.gradient(f, np.ones((3, 4), np.float32))


def test_comparisons_of_tracked_values_are_constants_that_fuse_into_where(fuse_at_once, rng):
    x = rng.standard_normal(8)

    def f(x):
        positive = x > 0
        assert positive._tape is None
        return mf.sum(mf.where(positive, x * x, -x))

    (g,) = mf.gradient(f, x)
    np.testing.assert_allclose(g, np.where(x > 0, 2 * x, -1.0))
    assert mf.fusion_stats()["fused_launches"] == 1


def test_an_unused_deferred_value_costs_nothing(fuse_at_once, rng):
    x = rng.standard_normal(4)

    def f(x):
        unused = mf.exp(x) * 3.0  # noqa: F841
        return mf.sum(x * x)

    mf.gradient(f, x)
    assert mf.fusion_stats()["computed"] == 1


def test_values_that_escape_the_gradient_call_are_computed_at_its_end(fuse_at_once):
    w = np.ones(3)
    kept = []

    def f(w):
        kept.append(w * 2.0)
        return mf.sum(w)

    mf.gradient(f, w)
    w[:] = 100.0           # an optimiser updates the parameters in place afterwards
    np.testing.assert_array_equal(kept[0].value, [2.0, 2.0, 2.0])


def test_shared_subexpressions_and_a_long_chain(fuse_at_once, rng):
    x = rng.standard_normal(5)

    def f(x):
        h = x
        for _ in range(100):            # over the size cap: computed in bounded pieces
            h = mf.tanh(h) * 0.5 + x
        shared = mf.sigmoid(h)
        return mf.sum(shared * shared + shared)

    value, (g,) = mf.withgradient(f, x)
    assert mf.fusion_stats()["early"] > 0
    old = mf.set_fusion(enabled=False)
    try:
        value_plain, (g_plain,) = mf.withgradient(f, x)
    finally:
        mf.set_fusion(**old)
    np.testing.assert_allclose(value, value_plain, rtol=1e-12)
    np.testing.assert_allclose(g, g_plain, rtol=1e-10)


def test_fusion_off_runs_every_op_now(rng):
    old = mf.set_fusion(enabled=False)
    try:
        mf.fusion_stats(reset=True)
        mf.gradient(lambda x: mf.sum(x * x + 1.0), rng.standard_normal(3))
        assert mf.fusion_stats()["deferred"] == 0
    finally:
        mf.set_fusion(**old)


def test_no_grad_and_stop_gradient_see_deferred_values(fuse_at_once):
    x = np.array([1.0, 2.0])

    def f(x):
        y = x * 3.0
        with mf.no_grad():
            c = y + 1.0          # a constant: no gradient flows through it
        return mf.sum(c * x + mf.stop_gradient(y) * x + y)

    (g,) = mf.gradient(f, x)
    np.testing.assert_allclose(g, (3 * x + 1) + 3 * x + 3)


def test_scalar_rules_fuse_with_the_ops_around_them(fuse_at_once):
    @mf.scalar_rule(lambda m, x, y: m.where(abs(x) < 1, 0.5, 0.0))
    def step(x):
        return 1.0 if x > 0 else 0.0

    x = np.array([-0.5, 0.25, 2.0])
    (g,) = mf.gradient(lambda x: mf.sum(step(x * 2.0) * 3.0), x)
    np.testing.assert_allclose(g, [0.0, 3.0, 0.0])
    assert mf.fusion_stats()["fused_launches"] == 1


OPS = [lambda a, b: a * b, lambda a, b: a + b, lambda a, b: a - b, lambda a, b: mf.tanh(a) * b,
       lambda a, b: mf.sigmoid(a) + b * 0.5, lambda a, b: mf.where(a > b, a, b * 2.0),
       lambda a, b: mf.maximum(a, b), lambda a, b: a / (1.0 + b * b), lambda a, b: mf.exp(-a * a) * b]


@pytest.mark.parametrize("seed", [0, 1, *(pytest.param(s, marks=pytest.mark.slow) for s in range(2, 12))])
def test_random_expressions_agree_with_and_without_fusion(seed):
    rng = np.random.default_rng(seed)
    program = [(int(rng.integers(len(OPS))), int(rng.integers(0, k + 3)), int(rng.integers(0, k + 3)))
               for k in range(int(rng.integers(2, 9)))]
    shapes = [(4, 3), (1, 3), (4, 1)]
    inputs = [rng.standard_normal(s) for s in shapes]

    def f(x, y, z):
        values = [x, y, z]
        for op, i, j in program:
            values.append(OPS[op](values[i], values[j]))
        return mf.sum(values[-1] * values[-2]) + mf.mean(values[-1])

    results = []
    for enabled in (False, True):
        old = mf.set_fusion(enabled=enabled, compile_after=1, min_elements=1)
        try:
            results.append(mf.withgradient(f, *inputs))
        finally:
            mf.set_fusion(**old)
    (plain, plain_grads), (fused, fused_grads) = results
    np.testing.assert_allclose(fused, plain, rtol=1e-10, atol=1e-12)
    for a, b in zip(fused_grads, plain_grads):
        if a is None or b is None:
            assert a is None and b is None or not np.any(a if b is None else b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_tiny_results_run_at_once(rng):
    with mf.fusion(min_elements=64):
        mf.fusion_stats(reset=True)
        mf.gradient(lambda x: mf.sum(x * x + 1.0), rng.standard_normal(8))
        assert mf.fusion_stats()["deferred"] == 0
        mf.gradient(lambda x: mf.sum(x * x + 1.0), rng.standard_normal(64))
        assert mf.fusion_stats()["deferred"] == 2
