"""The HM-LSTM cell update and boundary detector against hand-derived formulas."""
import numpy as np
import pytest

import minflux as mf
from models.cells import boundary, hm_update, hm_update_blend


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


def test_z_gradients_of_the_two_forms_differ_as_documented(pre):
    """Branches give z no gradient; the blend gives dc/dz = flush - update (at z = 0, zb = 1)."""
    z, zb = np.zeros((3, 1)), np.ones((3, 1))
    rest = tuple(pre[k] for k in "chfiog")

    def c_sum(form):
        return lambda z, zb: mf.sum(form(z, zb, *rest)[0])

    gz_branch, gzb_branch = mf.gradient(c_sum(hm_update), z, zb)
    gz_blend, gzb_blend = mf.gradient(c_sum(hm_update_blend), z, zb)
    flush = sig(pre["i"]) * np.tanh(pre["g"])
    update = sig(pre["f"]) * pre["c"] + flush
    assert not np.any(gz_branch) and not np.any(gzb_branch)
    np.testing.assert_allclose(gz_blend, (flush - update).sum(axis=1, keepdims=True), rtol=1e-10)
    np.testing.assert_allclose(gzb_blend, (update - pre["c"]).sum(axis=1, keepdims=True), rtol=1e-10)


@pytest.mark.parametrize("slope", [1.0, 2.5])
def test_boundary_is_a_step_with_the_straight_through_slope(slope):
    x = np.array([-1.5, -0.3, -1e-3, 0.0, 0.2, 0.39, 0.41, 3.0])
    np.testing.assert_array_equal(boundary(x, slope), (x > 0).astype(float))
    w = np.arange(1.0, 9.0)
    (g,) = mf.gradient(lambda x: mf.sum(w * boundary(x, slope)), x)
    want = np.where(np.abs(x) < 1 / slope, slope / 2, 0.0) * w
    np.testing.assert_allclose(g, want)
