"""The HM-LSTM cell update against hand-derived values and partials for FLUSH, COPY and UPDATE, on
the numpy and numba backends and in reverse mode; broadcast inputs receive reduced gradients."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.autograd import active_tape
from minflux.testing import check_grad


from minflux_models.cells import cell_update  # the paper's benchmark kernel


def sig(x):
    return 1 / (1 + np.exp(-x))


def expected(z, zb, c, f, i, g):
    """Value and d/dc, d/df, d/di, d/dg of the cell update, derived by hand per branch."""
    si, sf, tg = sig(i), sig(f), np.tanh(g)
    flush = np.broadcast_to(z == 1, c.shape)
    copy = np.broadcast_to((z != 1) & (zb == 0), c.shape)
    update = ~flush & ~copy
    value = np.where(flush, si * tg, np.where(copy, c, sf * c + si * tg))
    dc = np.where(update, sf, np.where(copy, 1.0, 0.0))
    df = np.where(update, c * sf * (1 - sf), 0.0)
    di = np.where(copy, 0.0, si * (1 - si) * tg)
    dg = np.where(copy, 0.0, si * (1 - tg * tg))
    return value, (dc, df, di, dg)


def inputs(dtype, n=6, m=5, seed=0):
    rng = np.random.default_rng(seed)
    z = np.array([1, 0, 0, 1, 0, 0], dtype)[:n, None]
    zb = np.array([0, 0, 1, 1, 1, 0], dtype)[:n, None]   # rows: FLUSH, COPY, UPDATE, FLUSH, UPDATE, COPY
    c, f, i, g = (rng.standard_normal((n, m)).astype(dtype) for _ in range(4))
    return z, zb, c, f, i, g


@pytest.fixture(params=["numpy", "numba", "reverse"])
def runner(request):
    """Calls the cell update with one backend (or in reverse mode)."""
    mode = "reverse" if request.param == "reverse" else "mixed"
    before = mf.get_elementwise_backend()
    mf.set_elementwise_backend("numpy" if request.param == "numpy" else "numba")
    yield lambda *args: cell_update(*args, mode=mode)
    mf.set_elementwise_backend(before)


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-12), (np.float32, 2e-6)])
def test_all_three_branches_match_hand_derived_formulas(runner, dtype, tol):
    z, zb, c, f, i, g = inputs(dtype)
    want_value, want_grads = expected(*(a.astype(np.float64) for a in (z, zb, c, f, i, g)))
    value = runner(z, zb, c, f, i, g)
    assert value.dtype == dtype and value.shape == c.shape
    np.testing.assert_allclose(value, want_value, rtol=tol, atol=tol)
    grads = mf.gradient(lambda c, f, i, g: mf.sum(runner(z, zb, c, f, i, g)), c, f, i, g)
    for got, want in zip(grads, want_grads):
        assert got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_gradient_matches_finite_differences_with_weighted_loss(runner):
    z, zb, c, f, i, g = inputs(np.float64)
    w = np.random.default_rng(3).standard_normal(c.shape)
    check_grad(lambda c, f, i, g: mf.sum(runner(z, zb, c, f, i, g) * w), c, f, i, g)


def test_mixed_mode_records_one_tape_node():
    z, zb, c, f, i, g = inputs(np.float64)
    counts = []

    def loss(c, f, i, g):
        before = len(active_tape().nodes)
        y = cell_update(z, zb, c, f, i, g)
        counts.append(len(active_tape().nodes) - before)
        return mf.sum(y)

    mf.gradient(loss, c, f, i, g)
    assert counts == [1]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_broadcast_inputs_receive_reduced_gradients(backend):
    """A differentiable (n, 1) or () input gets the gradient summed over the broadcast axes."""
    mf.set_elementwise_backend(backend)
    try:
        z, zb, c, f, i, g = inputs(np.float64)
        f_row = f[:, :1].copy()          # (n, 1)
        i_scalar = np.array(0.3)         # ()
        grads = mf.gradient(lambda c, f, i, g: mf.sum(cell_update(z, zb, c, f, i, g)), c, f_row, i_scalar, g)
        assert grads[1].shape == (6, 1) and grads[2].shape == ()
        _, (dc, df, di, dg) = expected(z, zb, c, np.broadcast_to(f_row, c.shape), i_scalar, g)
        np.testing.assert_allclose(grads[1], df.sum(axis=1, keepdims=True), rtol=1e-12)
        np.testing.assert_allclose(grads[2], di.sum(), rtol=1e-12)
        check_grad(lambda f, i: mf.sum(cell_update(z, zb, c, f, i, g) ** 2), f_row, i_scalar)
    finally:
        mf.set_elementwise_backend("numba")


def test_outside_a_gradient_only_the_primal_kernel_runs():
    from minflux.compiler import compiled_function as compiled_functions

    @mf.elementwise
    def fresh_update(z, zb, c, f, i, g):  # its own code object: a fresh cache entry
        if z == 1:
            return mf.sigmoid(i) * mf.tanh(g)
        elif zb == 0:
            return c
        return mf.sigmoid(f) * c + mf.sigmoid(i) * mf.tanh(g)

    z, zb, c, f, i, g = inputs(np.float64)
    out = fresh_update(z, zb, mf.Tensor(c), f, i, g)
    assert isinstance(out, mf.Tensor) and out._tape is None
    np.testing.assert_allclose(out.value, expected(z, zb, c, f, i, g)[0], rtol=1e-12)
    entry = compiled_functions.compiled(fresh_update.fn)
    assert list(entry.duals) == [(("f",) * 6, (), "mixed")]
    assert entry.duals[(("f",) * 6, (), "mixed")].slots == []


def test_copy_branch_partials_are_folded_where_constant():
    """d value / dc is 1 on COPY and sigmoid(f) on UPDATE: one materialised slot; d/dz is absent."""
    from minflux.compiler import compiled_function as compiled_functions
    d = compiled_functions.compiled(cell_update.fn).dual_for(("f",) * 6, (2, 3, 4, 5))
    assert d.slots == [(0, 2), (0, 3), (0, 4), (0, 5)]
    d_const = compiled_functions.compiled(cell_update.fn).dual_for(("f",) * 6, (0, 1))
    assert d_const.slots == [] and d_const.constants == {}
