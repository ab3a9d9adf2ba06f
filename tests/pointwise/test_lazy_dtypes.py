"""Fused expressions give exactly the dtypes of op-by-op evaluation (numpy's promotion rule) and the
same values and gradients, for random DAGs over int, bool, float32 and float64 leaves and over Python
and numpy number constants."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minflux as mf

N = 6
LEAF_DTYPES = {"x": [np.float32, np.float64], "y": [np.float32, np.float64], "k": [np.int64, np.int8, np.int32],
               "b": [np.bool_]}
CONSTANTS = [0.5, 2, True, np.float32(1.5), np.float64(0.25), np.int64(3)]
BINARY = [mf.add, mf.subtract, mf.multiply, mf.maximum, mf.minimum]
UNARY = [mf.tanh, mf.abs, mf.negative, mf.sign, mf.floor]
COMPARE = [mf.less, mf.greater_equal]

step = st.one_of(
    st.tuples(st.just("binary"), st.sampled_from(BINARY), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("constant"), st.sampled_from(BINARY), st.integers(0, 99), st.sampled_from(CONSTANTS)),
    st.tuples(st.just("unary"), st.sampled_from(UNARY), st.integers(0, 99), st.just(None)),
    st.tuples(st.just("where"), st.sampled_from(COMPARE), st.integers(0, 99), st.integers(0, 99)),
)


def build(steps, x, y, k, b):
    """The DAG the steps describe over the leaves, ending in a float that depends on x."""
    values = [x, y, k, b]
    for kind, op, i, j in steps:
        a = values[i % len(values)]
        if kind == "binary":
            values.append(op(a, values[j % len(values)]))
        elif kind == "constant":
            values.append(op(a, j))
        elif kind == "unary":
            refused = op in (mf.negative, mf.sign) and getattr(a, "dtype", None) == np.bool_  # as numpy
            values.append(mf.logical_not(a) if refused else op(a))
        else:
            other = values[j % len(values)]
            values.append(mf.where(op(a, other), a, other))
    return values[-1] * x


def run(steps, leaves, fused: bool):
    seen = {}

    def loss(x, y, k, b):
        out = build(steps, x, y, k, b)
        seen["dtype"] = out.dtype
        return mf.sum(out), out

    with mf.fusion(enabled=fused, compile_after=1, min_elements=1):
        (total, out), grads = mf.withgradient(loss, *leaves)
    return seen["dtype"], out, grads[:2]


def leaves_of(dtypes, rng):
    x = rng.uniform(-2, 2, N).astype(dtypes["x"])
    y = rng.uniform(-2, 2, N).astype(dtypes["y"])
    k = rng.integers(-3, 4, N).astype(dtypes["k"])
    b = rng.random(N) < 0.5
    return x, y, k, b


@pytest.fixture
def numpy_kernels():
    before = mf.get_elementwise_backend()
    mf.set_elementwise_backend("numpy")     # no compile time per random structure
    yield
    mf.set_elementwise_backend(before)


def check_agree(steps, leaves):
    with np.errstate(all="ignore"):
        dtype0, out0, grads0 = run(steps, leaves, fused=False)
        dtype1, out1, grads1 = run(steps, leaves, fused=True)
    assert dtype1 == dtype0 == out0.dtype == out1.dtype
    rtol = 1e-5 if out0.dtype == np.float32 else 1e-12
    np.testing.assert_allclose(out1, out0, rtol=rtol, atol=rtol)
    for g0, g1, leaf in zip(grads0, grads1, leaves):
        assert (g0 is None) == (g1 is None)
        if g0 is not None:
            assert g0.dtype == g1.dtype == leaf.dtype and g0.shape == g1.shape == leaf.shape
            np.testing.assert_allclose(g1, g0, rtol=rtol, atol=rtol)


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(step, min_size=1, max_size=6),
       dtypes=st.fixed_dictionaries({name: st.sampled_from(options) for name, options in LEAF_DTYPES.items()}),
       seed=st.integers(0, 2 ** 16))
def test_fused_dags_match_op_by_op_dtypes_values_and_gradients(numpy_kernels, steps, dtypes, seed):
    check_agree(steps, leaves_of(dtypes, np.random.default_rng(seed)))


def test_an_integer_leaf_promotes_a_float32_expression_to_float64(rng):
    x = rng.standard_normal(4096).astype(np.float32)
    big = np.arange(4096)
    results = []
    for fused in (False, True, True):
        with mf.fusion(enabled=fused, compile_after=1):
            (value, out), (g,) = mf.withgradient(lambda x: (mf.sum(big - x * x), big - x * x), x)
        results.append((out.dtype, float(value)))
        assert g.dtype == np.float32
        np.testing.assert_allclose(g, -2 * x, rtol=1e-6)
    assert results[0][0] == np.float64 and len(set(results)) == 1


def test_numpy_scalars_promote_as_numpy_promotes_them(rng):
    x = rng.standard_normal(4096).astype(np.float32)
    for constant, dtype in ((np.int64(3), np.float64), (np.float64(0.5), np.float64), (3, np.float32),
                            (0.5, np.float32), (np.float32(0.5), np.float32)):
        for fused in (False, True):
            with mf.fusion(enabled=fused, compile_after=1):
                (_, out), _ = mf.withgradient(lambda x: (mf.sum(x * constant + 1), x * constant + 1), x)
            assert out.dtype == dtype, (constant, fused)
