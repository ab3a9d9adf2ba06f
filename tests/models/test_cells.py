"""The HM-LSTM cell update and boundary detector against hand-derived formulas."""
import numpy as np
import pytest

import minflux as mf
from minflux_models.cells import boundary, hm_update, hm_update_blend

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def sig(x):
    return 1 / (1 + np.exp(-x))


@pytest.fixture
def pre():
    rng = np.random.default_rng(1)
    return {k: rng.normal(size=(3, 4)) for k in "chfiog"}


def expected(z, zb, p):
    """FLUSH / COPY / UPDATE written out by hand from the paper's equations."""
    c, h, f, i, o, g = (p[k] for k in "chfiog")
    if z == 1:
        c_new = sig(i) * np.tanh(g)
    elif zb == 0:
        return c, h
    else:
        c_new = sig(f) * c + sig(i) * np.tanh(g)
    return c_new, sig(o) * np.tanh(c_new)


@pytest.mark.parametrize("form", [hm_update, hm_update_blend], ids=["branch", "blend"])
@pytest.mark.parametrize("z, zb, name", [(1.0, 1.0, "flush"), (1.0, 0.0, "flush"), (0.0, 0.0, "copy"),
                                         (0.0, 1.0, "update")])
def test_cell_update_matches_the_paper(form, z, zb, name, pre):
    c, h = form(z, zb, pre["c"], pre["h"], pre["f"], pre["i"], pre["o"], pre["g"])
    want_c, want_h = expected(z, zb, pre)
    np.testing.assert_allclose(c, want_c, rtol=1e-12)
    np.testing.assert_allclose(h, want_h, rtol=1e-12)


def test_branch_and_blend_agree_on_mixed_boundaries(pre):
    rng = np.random.default_rng(2)
    z = (rng.random((3, 1)) < 0.5).astype(float)
    zb = (rng.random((3, 1)) < 0.5).astype(float)
    args = (z, zb, pre["c"], pre["h"], pre["f"], pre["i"], pre["o"], pre["g"])
    for got, want in zip(hm_update(*args), hm_update_blend(*args)):
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_cell_gradients_against_finite_differences(pre):
    from minflux.testing import check_grad

    z = np.array([[1.0], [0.0], [0.0]])
    zb = np.array([[0.0], [0.0], [1.0]])  # one row of each of FLUSH, COPY, UPDATE
    w = np.random.default_rng(3).normal(size=(3, 4))

    def loss(c, h, f, i, o, g):
        c_new, h_new = hm_update(z, zb, c, h, f, i, o, g)
        return mf.sum(w * c_new + h_new * h_new)

    check_grad(loss, *(pre[k] for k in "chfiog"))


@pytest.mark.parametrize("z, zb", [(1.0, 1.0), (1.0, 0.0), (0.0, 0.0), (0.0, 1.0)])
def test_blend_passes_gradient_to_the_boundaries_through_the_choice_of_operation(z, zb, pre):
    """The paper's blend: ``c' = z F + (1 - z) zb U + copy c``, ``h' = (1 - copy) s(o) tanh(c') + copy h``,
    ``copy = (1 - z)(1 - zb)``; its derivatives in z and zb written out by hand, and finite differences."""
    from minflux.testing import check_grad

    c, h, f, i, o, g = (pre[k] for k in "chfiog")
    zs, zbs = np.full((3, 1), z), np.full((3, 1), zb)
    w = np.random.default_rng(4).normal(size=(2, 3, 4))

    def loss(z, zb, c, h, f, i, o, g):
        c_new, h_new = hm_update_blend(z, zb, c, h, f, i, o, g)
        return mf.sum(w[0] * c_new + w[1] * h_new)

    check_grad(loss, zs, zbs, c, h, f, i, o, g)
    flush = sig(i) * np.tanh(g)
    update = sig(f) * c + flush
    copy = (1 - z) * (1 - zb)
    c_new = z * flush + (1 - z) * zb * update + copy * c
    out = sig(o) * np.tanh(c_new)
    dc_dz, dc_dzb = flush - zb * update - (1 - zb) * c, (1 - z) * (update - c)
    dh_dz = (1 - zb) * (out - h) + (1 - copy) * sig(o) * (1 - np.tanh(c_new) ** 2) * dc_dz
    dh_dzb = (1 - z) * (out - h) + (1 - copy) * sig(o) * (1 - np.tanh(c_new) ** 2) * dc_dzb
    gz, gzb = mf.gradient(loss, zs, zbs, c, h, f, i, o, g)[:2]
    np.testing.assert_allclose(gz, (w[0] * dc_dz + w[1] * dh_dz).sum(axis=1, keepdims=True), rtol=1e-10)
    np.testing.assert_allclose(gzb, (w[0] * dc_dzb + w[1] * dh_dzb).sum(axis=1, keepdims=True), rtol=1e-10)

    def branch_loss(z, zb, c):
        c_new, h_new = hm_update(z, zb, c, h, f, i, o, g)
        return mf.sum(w[0] * c_new + w[1] * h_new)

    gz_branch, gzb_branch, gc_branch = mf.gradient(branch_loss, zs, zbs, c)
    assert gz_branch is None and gzb_branch is None   # branches give the boundaries no gradient
    assert gc_branch.shape == c.shape
    with pytest.raises(ValueError, match="only through comparisons and conditions"):
        mf.gradient(lambda z, zb: branch_loss(z, zb, c), zs, zbs)


@pytest.mark.parametrize("slope", [1.0, 2.5])
def test_boundary_is_a_step_with_the_straight_through_slope(slope):
    x = np.array([-1.5, -0.3, -1e-3, 0.0, 0.2, 0.39, 0.41, 3.0])
    np.testing.assert_array_equal(boundary(x, slope), (x > 0).astype(float))
    w = np.arange(1.0, 9.0)
    (g,) = mf.gradient(lambda x: mf.sum(w * boundary(x, slope)), x)
    want = np.where(np.abs(x) < 1 / slope, slope / 2, 0.0) * w
    np.testing.assert_allclose(g, want)
