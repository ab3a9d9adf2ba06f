"""check_grad must catch wrong gradients, name the worst element and pass correct ones."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.autograd import record
from minflux.testing import GradientMismatch, check_grad


def square_with_wrong_vjp(x):
    v = x.value if isinstance(x, mf.Tensor) else x

    def vjp(g, needs):
        wrong = 2 * v
        wrong.reshape(-1)[-1] *= 1.01  # off by 1% in the last element only
        return [g * wrong]

    return record("square", v * v, [x], vjp)


def test_a_wrong_gradient_is_reported_with_its_element():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    with pytest.raises(GradientMismatch, match=r"argument 0, leaf <array>, element \(1, 1\): analytic 8\.08 "
                                               r"vs finite differences 7\.99999"):
        check_grad(lambda x: mf.sum(square_with_wrong_vjp(x)), x)


def test_a_correct_gradient_passes_and_reports_small_error():
    err = check_grad(lambda x: mf.sum(x * x), np.array([1.0, 2.0]))
    assert 0 <= err < 1


def test_missing_gradient_counts_as_zero():
    def f(x):
        # depends on x, records no gradient (the zero term keeps the loss on the tape)
        return mf.sum(mf.stop_gradient(x) * mf.to_numpy(x)) + 0.0 * mf.sum(x)

    with pytest.raises(GradientMismatch):
        check_grad(f, np.array([1.0, 2.0]))


def test_trees_and_leaf_names():
    class Model:
        def __init__(self):
            self.a, self.b = np.array([1.0, 2.0]), np.array([0.5])

    def f(m):
        return mf.sum(square_with_wrong_vjp(m.b) + m.a)

    check_grad(lambda m: mf.sum(m.a * m.b), Model())
    with pytest.raises(GradientMismatch, match="leaf b"):
        check_grad(f, Model())


def test_arguments_are_not_modified():
    x = np.array([1.0, 2.0], dtype=np.float32)
    check_grad(lambda x: mf.sum(x ** 3), x)
    assert x.dtype == np.float32 and x.tolist() == [1.0, 2.0]
