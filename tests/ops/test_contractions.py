"""einsum, tensordot, dot and outer: values against numpy, gradients against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

EINSUM_CASES = [
    ("ij,jk->ik", [(2, 3), (3, 4)]),
    ("ij,jk", [(2, 3), (3, 4)]),                  # implicit output
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(4,), (4,)]),
    ("i,j->ij", [(3,), (2,)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),                          # a letter summed inside one operand
    ("ij->ji", [(3, 4)]),
    ("ii->i", [(3, 3)]),                          # diagonal
    ("ii", [(3, 3)]),                             # trace
    ("iij->j", [(2, 2, 3)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),   # broadcast batch axes, one of length 1
    ("...i,i->...", [(2, 3, 4), (4,)]),
    ("ij,ik,il->jkl", [(2, 3), (2, 2), (2, 4)]),
    ("ij,j->i", [(3, 1), (4,)]),                  # a length-1 axis broadcast against another operand
]


@pytest.mark.parametrize("spec,shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_numpy_and_finite_differences(spec, shapes, rng):
    operands = [rng.standard_normal(s) for s in shapes]
    want = np.einsum(spec, *operands)
    got = mf.einsum(spec, *operands)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    weights = rng.standard_normal(np.shape(want))
    check_grad(lambda *xs: mf.sum(mf.einsum(spec, *xs) * weights), *operands)


def test_einsum_gradient_of_a_trace_is_the_identity():
    g, = mf.gradient(lambda a: mf.einsum("ii", a), np.zeros((3, 3)))
    np.testing.assert_array_equal(g, np.eye(3))


def test_einsum_keeps_float32():
    a = np.ones((2, 3), np.float32)
    assert mf.einsum("ij,jk->ik", a, a.T).dtype == np.float32
    g, = mf.gradient(lambda a: mf.sum(mf.einsum("ij,kj->ik", a, a)), a)
    assert g.dtype == np.float32


def test_einsum_names_a_subscript_mismatch():
    with pytest.raises(ValueError, match="operand of shape"):
        mf.einsum("ijk,jk->i", np.ones((2, 3)), np.ones((3, 4)))
    with pytest.raises(ValueError, match="names 2 operands"):
        mf.einsum("ij,jk->ik", np.ones((2, 3)))


TENSORDOT_CASES = [
    ((2, 3, 4), (3, 4, 5), 2),
    ((2, 3), (3, 4), 1),
    ((2, 3), (4, 5), 0),
    ((2, 3, 4), (4, 3, 5), ([1, 2], [1, 0])),
    ((3, 2, 4), (2, 5), ([1], [0])),
    ((3, 4), (3, 4), ([0, 1], [0, 1])),
]


@pytest.mark.parametrize("sa,sb,axes", TENSORDOT_CASES, ids=str)
def test_tensordot_matches_numpy_and_finite_differences(sa, sb, axes, rng):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    want = np.tensordot(a, b, axes=axes)
    np.testing.assert_allclose(mf.tensordot(a, b, axes=axes), want, rtol=1e-12)
    weights = rng.standard_normal(np.shape(want))
    check_grad(lambda a, b: mf.sum(mf.tensordot(a, b, axes=axes) * weights), a, b)


def test_tensordot_names_unequal_contracted_lengths():
    with pytest.raises(ValueError, match="has length 3 but axis 0"):
        mf.tensordot(np.ones((2, 3)), np.ones((4, 2)), axes=([1], [0]))


@pytest.mark.parametrize("sa,sb", [((4,), (4,)), ((2, 3), (3, 4)), ((3,), (3, 2)), ((2, 3), (3,)),
                                   ((2, 3, 4), (5, 4, 2)), ((), (3,)), ((2, 3), ())], ids=str)
def test_dot_matches_numpy_and_finite_differences(sa, sb, rng):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    want = np.dot(a, b)
    np.testing.assert_allclose(mf.dot(a, b), want, rtol=1e-12)
    weights = rng.standard_normal(np.shape(want))
    check_grad(lambda a, b: mf.sum(mf.dot(a, b) * weights), a, b)


@pytest.mark.parametrize("sa,sb", [((3,), (4,)), ((2, 2), (3,)), ((1,), (5,))], ids=str)
def test_outer_matches_numpy_and_finite_differences(sa, sb, rng):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    np.testing.assert_allclose(mf.outer(a, b), np.outer(a, b), rtol=1e-12)
    weights = rng.standard_normal((a.size, b.size))
    check_grad(lambda a, b: mf.sum(mf.outer(a, b) * weights), a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_contractions_keep_the_dtype(dtype):
    a = np.ones((2, 3), dtype)
    for out in (mf.tensordot(a, a.T, 1), mf.dot(a, a.T), mf.outer(a[0], a[1]), mf.einsum("ij->", a)):
        assert out.dtype == dtype
