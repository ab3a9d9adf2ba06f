"""Module: parameters discovered by walking attributes, dotted names, counts, repr, `trainable`."""
import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


class Encoder(mf.nn.Module):
    def __init__(self, rng):
        self.embed = mf.nn.Embedding(10, 4, rng=rng)
        self.cells = [mf.nn.LSTMCell(4, 3, rng=rng)]
        self.heads = {"out": mf.nn.Dense(3, 10, rng=rng)}
        self.steps = np.zeros(2, np.int64)   # an integer buffer: saved, never a parameter
        self.name = "encoder"                # configuration


class Plain:
    """A user layer with no base class."""

    def __init__(self):
        self.W = np.ones((2, 3))
        self.b = np.zeros(3)

    def __call__(self, x):
        return x @ self.W + self.b


def test_dotted_names_and_count():
    model = Encoder(np.random.default_rng(0))
    names = [n for n, _ in model.named_parameters()]
    assert names == ["embed.W", "cells.0.Wx", "cells.0.Wh", "cells.0.b", "heads.out.W", "heads.out.b"]
    assert model.parameter_count() == 40 + (12 + 9 + 3) * 4 + 30 + 10


def test_tied_arrays_are_one_parameter():
    r = np.random.default_rng(0)
    model = mf.nn.Chain(mf.nn.Dense(4, 4, rng=r), mf.nn.Dense(4, 4, rng=r))
    model.layers[1].W = model.layers[0].W
    assert [n for n, _ in model.named_parameters()] == ["layers.0.W", "layers.0.b", "layers.1.b"]
    assert model.parameter_count() == 16 + 4 + 4


def test_trainable_excludes_attributes_from_gradients():
    class Frozen(mf.nn.Module):
        trainable = ("W",)

        def __init__(self):
            self.W = np.ones(2)
            self.shift = np.ones(2)

        def __call__(self, x):
            return x * self.W + self.shift

    model = Frozen()
    assert [n for n, _ in model.named_parameters()] == ["W"]
    (g,) = mf.gradient(lambda m: mf.sum(m(np.array([2.0, 3.0]))), model)
    np.testing.assert_array_equal(g.W, [2.0, 3.0])
    assert g.shift is None
    assert repr(model) == ("Frozen(W: float64[2], shift: float64[2] (not trainable))  "
                           "# 2 parameters, 2 non-trainable")


def test_repr_lists_layers_shapes_and_counts():
    text = repr(Encoder(np.random.default_rng(0)))
    lines = text.splitlines()
    assert lines[0].startswith("Encoder(") and lines[0].endswith("# 176 parameters, 2 non-trainable")
    assert any(line.strip().startswith("embed = Embedding(10 => 4)") and line.endswith("# 40 parameters")
               for line in lines)
    assert any("cells.0 = LSTMCell(4 => 3)" in line and "# 96 parameters" in line for line in lines)
    assert any("heads.out = Dense(3 => 10)" in line for line in lines)
    assert any("steps: int64[2]  (not trainable)" in line for line in lines)


def test_summary_of_a_plain_class():
    assert mf.nn.summary(Plain()) == "Plain(W: float64[2, 3], b: float64[3])  # 9 parameters"


def test_a_plain_class_works_with_gradient_and_optimisers():
    model = Plain()
    x = np.array([[1.0, 2.0]])
    (g,) = mf.gradient(lambda m: mf.sum(m(x)), model)
    np.testing.assert_array_equal(g.W, [[1, 1, 1], [2, 2, 2]])
    state = mf.optim.setup(mf.optim.Descent(0.5), model)
    mf.optim.update(state, model, g)
    np.testing.assert_array_equal(model.W, [[0.5, 0.5, 0.5], [0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(model.b, [-0.5, -0.5, -0.5])
