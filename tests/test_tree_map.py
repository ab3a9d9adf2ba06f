"""mf.tree.map over several trees: structure, None leaves, tied arrays, configuration, errors."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf


def test_gradient_accumulation_over_batches_is_one_map(rng):
    model = mf.nn.Chain(mf.nn.Dense(3, 4, mf.tanh, rng=rng, dtype=np.float64),
                        mf.nn.Dropout(0.0, rng=rng), mf.nn.Dense(4, 1, rng=rng, dtype=np.float64))
    batches = [rng.standard_normal((5, 3)) for _ in range(3)]

    def loss(m, x):
        return mf.sum(m(x) ** 2)
    total = None
    for x in batches:
        g, _ = mf.gradient(loss, model, x)
        total = g if total is None else mf.tree.map(lambda a, b: a + b, total, g)
    whole, = mf.gradient(lambda m: sum(loss(m, x) for x in batches), model)
    for (name, a), (_, b) in zip(mf.tree.named_leaves(total), mf.tree.named_leaves(whole)):
        np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=name)
    assert total.layers[0].activation is None   # gradient trees keep None for configuration


def test_map_keeps_the_first_trees_configuration_and_ties():
    w = np.ones(2)
    model = {"a": w, "tied": w, "act": np.tanh, "n": 3}
    grads = {"a": np.full(2, 0.5), "tied": None, "act": None, "n": None}
    grads["tied"] = grads["a"]
    stepped = mf.tree.map(lambda p, g: p - g, model, grads)
    assert stepped["act"] is np.tanh and stepped["n"] == 3
    np.testing.assert_array_equal(stepped["a"], [0.5, 0.5])
    assert stepped["tied"] is stepped["a"]
    assert model["a"] is w and (w == 1).all()


def test_mixed_none_is_an_error_unless_none_as_zero():
    a = {"W": np.ones(2), "b": np.ones(1)}
    b = {"W": np.ones(2), "b": None}
    with pytest.raises(ValueError, match=r"at b .*tree 1 holds None.*none_as_zero"):
        mf.tree.map(lambda x, y: x + y, a, b)
    out = mf.tree.map(lambda x, y: x + y, a, b, none_as_zero=True)
    np.testing.assert_array_equal(out["b"], [1.0])
    out = mf.tree.map(lambda x, y: x + y, b, a, none_as_zero=True)   # None in the first tree too
    np.testing.assert_array_equal(out["b"], [1.0])


def test_a_whole_subtree_of_none_beside_arrays():
    a = {"layer": {"W": np.ones(2)}, "other": None}
    b = {"layer": None, "other": None}
    assert mf.tree.map(lambda x, y: x * y, b, b) == b
    with pytest.raises(ValueError, match="layer.W"):
        mf.tree.map(lambda x, y: x + y, a, b)
    out = mf.tree.map(lambda x, y: x + y, a, b, none_as_zero=True)
    np.testing.assert_array_equal(out["layer"]["W"], [1.0, 1.0])


def test_three_trees_and_objects(rng):
    layer = mf.nn.Dense(2, 2, rng=rng)
    out = mf.tree.map(lambda x, y, z: x + y + z, layer, layer, layer)
    assert isinstance(out, mf.nn.Dense) and out is not layer
    np.testing.assert_array_equal(out.W, 3 * layer.W)


def test_different_structures_are_errors():
    with pytest.raises(ValueError, match="different structure"):
        mf.tree.map(lambda x, y: x, {"a": np.ones(1)}, {"b": np.ones(1)})
    with pytest.raises(ValueError, match="different structure"):
        mf.tree.map(lambda x, y: x, [np.ones(1)], [np.ones(1), np.ones(1)])
