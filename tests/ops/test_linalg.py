"""matmul over vector, matrix and batched shapes; gradients against finite differences and the
textbook formulas dA = G B^T, dB = A^T G."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

SHAPES = [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)), ((2, 3, 4), (4, 5)),
          ((3, 4), (2, 4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((4,), (2, 4, 3))]


@pytest.mark.parametrize("sa,sb", SHAPES, ids=str)
def test_matmul_value_and_gradient(sa, sb, rng):
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    np.testing.assert_allclose(mf.matmul(a, b), a @ b)
    w = rng.standard_normal(np.shape(a @ b))
    check_grad(lambda a, b: mf.sum(mf.matmul(a, b) * w), a, b)


def test_matmul_gradient_formula(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    g = rng.standard_normal((3, 2))
    ga, gb = mf.gradient(lambda a, b: mf.sum((a @ b) * g), a, b)
    np.testing.assert_allclose(ga, g @ b.T)
    np.testing.assert_allclose(gb, a.T @ g)


def test_operator_and_reflected_operator(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
    np.testing.assert_allclose((mf.Tensor(a) @ b).value, a @ b)
    np.testing.assert_allclose((a @ mf.Tensor(b)).value, a @ b)


def test_gradient_only_for_the_tracked_operand(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
    ga, = mf.gradient(lambda a: mf.sum(a @ b), a)
    np.testing.assert_allclose(ga, np.ones((2, 2)) @ b.T)


def test_mismatch_names_both_shapes():
    with pytest.raises(ValueError, match=r"mf\.matmul: shapes \(2, 3\) and \(4, 5\) do not match"):
        mf.matmul(np.ones((2, 3)), np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"mf\.matmul: operands must have at least one dimension"):
        mf.matmul(np.ones(3), 2.0)
