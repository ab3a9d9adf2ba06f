"""State trees: structure mirroring the model, tied arrays, update errors, adjust, freeze and thaw."""

import numpy as np
import pytest

import minflux as mf
from minflux import optim

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def model(seed=0):
    r = np.random.default_rng(seed)
    return mf.nn.Chain(mf.nn.Dense(3, 4, mf.tanh, rng=r), mf.relu, mf.nn.Dense(4, 2, rng=r))


def test_structure_mirrors_the_model():
    m = model()
    state = optim.setup(optim.Adam(), m)
    assert isinstance(state.layers, list) and len(state.layers) == 3
    assert state.layers[1] is None                        # relu has no parameters
    leaf = state.layers[0].W
    assert isinstance(leaf, optim.Leaf) and leaf.rule == optim.Adam() and not leaf.frozen
    m0, v0, t0 = leaf.state
    assert m0.shape == (3, 4) and m0.dtype == np.float32 and t0 == 0 and not m0.any()
    assert [n for n, _ in optim.named_state_leaves(state)] == [n for n, _ in m.named_parameters()]
    assert "layers.2.b: Leaf(Adam(" in repr(state)


def test_non_trainable_and_integer_arrays_get_no_state():
    class Layer:
        trainable = ("W",)

        def __init__(self):
            self.W, self.fixed, self.ids = np.ones(2), np.ones(2), np.arange(3)

    state = optim.setup(optim.Descent(), {"layer": Layer(), "count": np.zeros(1, np.int64)})
    assert list(state) == ["layer"] and list(vars(state["layer"])) == ["_kind", "W"]


def test_setup_warns_without_parameters():
    with pytest.warns(UserWarning, match="found no trainable float arrays"):
        state = optim.setup(optim.Adam(), {"ids": np.arange(3), "name": "x"})
    optim.update(state, {"ids": np.arange(3)}, {"ids": None})  # a no-op, not an error


def test_tied_arrays_share_one_leaf_and_update_once():
    W = np.array([1.0, 2.0])
    tied = {"encoder": {"W": W}, "decoder": {"W": W}}
    state = optim.setup(optim.Adam(lr=0.1), tied)
    assert state["encoder"]["W"] is state["decoder"]["W"]
    x1, x2 = np.array([1.0, 0.0]), np.array([0.0, 3.0])
    (g,) = mf.gradient(lambda t: mf.sum(t["encoder"]["W"] * x1) + mf.sum(t["decoder"]["W"] * x2), tied)
    np.testing.assert_array_equal(g["encoder"]["W"], [1.0, 3.0])  # the full gradient at both places
    state_d = optim.setup(optim.Descent(0.5), tied)
    optim.update(state_d, tied, g)
    np.testing.assert_array_equal(W, [0.5, 0.5])                  # 1 - 0.5 * 1, 2 - 0.5 * 3: once
    optim.update(state, tied, g)
    assert state["decoder"]["W"].state[2] == 1                    # one Adam step, not two


def test_update_changes_arrays_in_place_and_skips_missing_gradients():
    m = model()
    W0, W2, b2 = m.layers[0].W, m.layers[2].W.copy(), m.layers[2].b.copy()
    state = optim.setup(optim.Descent(0.1), m)
    x = np.ones((5, 3), np.float32)
    (g,) = mf.gradient(lambda m: mf.sum(m(x)), m)
    g.layers[2].b = None
    optim.update(state, m, g)
    assert m.layers[0].W is W0
    np.testing.assert_allclose(m.layers[2].W, W2 - 0.1 * g.layers[2].W, rtol=1e-6)
    np.testing.assert_array_equal(m.layers[2].b, b2)


def test_update_explains_structure_errors():
    m = model()
    state = optim.setup(optim.Descent(0.1), m)
    grads = mf.gradient(lambda m: mf.sum(m(np.ones((1, 3), np.float32))), m)
    with pytest.raises(ValueError, match=r"grads\[0\]"):
        optim.update(state, m, grads)                         # the whole tuple, not the model's part
    with pytest.raises(ValueError, match="shape"):
        optim.update(optim.setup(optim.Descent(), np.ones(2)), np.ones(2), np.ones(3))
    with pytest.raises(TypeError, match="rule such as optim.Adam"):
        optim.setup(m, optim.Adam())


def test_adjust_whole_tree_branch_and_chain():
    m = model()
    state = optim.setup(optim.chain(optim.ClipNorm(1.0), optim.Adam(lr=1e-3)), m)
    optim.adjust(state, lr=0.5)
    assert all(leaf.rule.rules[1].lr == 0.5 for _, leaf in optim.named_state_leaves(state))
    optim.adjust(state.layers[2], lr=0.25, max_norm=2.0)
    assert state.layers[2].W.rule == optim.chain(optim.ClipNorm(2.0), optim.Adam(lr=0.25))
    assert state.layers[0].W.rule.rules[1].lr == 0.5
    with pytest.raises(ValueError, match="no rule in this state has eta; .*lr"):
        optim.adjust(state, eta=0.1)


def test_adjusted_learning_rate_takes_effect():
    x = np.array([1.0])
    state = optim.setup(optim.Descent(0.1), x)
    optim.adjust(state, lr=0.5)
    optim.update(state, x, np.array([1.0]))
    np.testing.assert_array_equal(x, [0.5])


def test_freeze_and_thaw_a_branch():
    m = model()
    state = optim.setup(optim.Descent(0.1), m)
    before, before2 = m.layers[0].W.copy(), m.layers[2].W.copy()
    optim.freeze(state.layers[0])
    assert state.layers[0].W.frozen and not state.layers[2].W.frozen
    (g,) = mf.gradient(lambda m: mf.sum(m(np.ones((2, 3), np.float32))), m)
    optim.update(state, m, g)
    np.testing.assert_array_equal(m.layers[0].W, before)
    np.testing.assert_allclose(m.layers[2].W, before2 - 0.1 * g.layers[2].W, rtol=1e-6)
    optim.thaw(state)
    optim.update(state, m, g)
    np.testing.assert_allclose(m.layers[0].W, before - 0.1 * g.layers[0].W, rtol=1e-6)


def test_to_device_cpu_keeps_ties_in_state():
    W = np.ones(2)
    state = optim.setup(optim.Momentum(), {"a": W, "b": W})
    moved = mf.to_device(state, "cpu")
    assert moved["a"] is moved["b"]
