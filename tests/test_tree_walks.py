"""Tree walks visit each object once (shared subtrees are not re-walked) and work at any depth."""
import sys

import numpy as np
import pytest

import minflux as mf
from minflux import optim, tree


def shared(depth: int):
    """``t = [t, t]`` nested ``depth`` deep: 2**depth paths, depth + 1 distinct objects."""
    w = np.ones(2)
    t = [w]
    for _ in range(depth):
        t = [t, t]
    return t, w


def deep(depth: int):
    """A chain of ``depth`` nested lists with one array at the bottom and one at each level."""
    leaves = [np.full(1, float(k)) for k in range(depth + 1)]
    t = [leaves[0]]
    for k in range(1, depth + 1):
        t = [t, leaves[k]]
    return t, leaves


@pytest.fixture
def children_calls(monkeypatch):
    calls = [0]
    original = tree.children

    def counting(x, *args, **kwargs):
        calls[0] += 1
        return original(x, *args, **kwargs)

    monkeypatch.setattr(tree, "children", counting)
    monkeypatch.setattr(optim.state, "children", counting)
    return calls


WALKS = {
    "named_leaves": lambda t: list(tree.named_leaves(t)),
    "map_arrays": lambda t: tree.map_arrays(lambda a: a * 2, t),
    "map": lambda t: tree.map(lambda a, b: a + b, t, t),
    "setup": lambda t: optim.setup(optim.Descent(0.1), t),
}


@pytest.mark.parametrize("walk", sorted(WALKS))
def test_shared_subtrees_are_walked_once(walk, children_calls):
    t, _ = shared(16)
    WALKS[walk](t)
    assert children_calls[0] <= 6 * 17  # a path-by-path walk makes more than 2**16 calls


def test_results_on_shared_subtrees_are_right():
    t, w = shared(30)
    assert [name for name, _ in tree.named_leaves(t)] == [".".join(["0"] * 31)]
    assert tree.leaves(t) == [w]
    doubled = tree.map_arrays(lambda a: a * 2, t)
    assert doubled[0] is doubled[1]                    # still shared, mapped once
    np.testing.assert_array_equal(tree.leaves(doubled)[0], [2.0, 2.0])
    summed = tree.map(lambda a, b: a + b, t, doubled)
    np.testing.assert_array_equal(tree.leaves(summed)[0], [3.0, 3.0])
    (g,) = mf.gradient(lambda m: mf.sum(tree.leaves(m)[0] * 3.0), t)
    np.testing.assert_array_equal(tree.leaves(g)[0], [3.0, 3.0])
    state = optim.setup(optim.Descent(0.5), t)
    optim.update(state, t, g)
    np.testing.assert_array_equal(w, [-0.5, -0.5])


def test_trees_deeper_than_the_recursion_limit():
    depth = sys.getrecursionlimit() + 500
    t, leaves = deep(depth)
    names = [name for name, _ in tree.named_leaves(t)]
    assert len(names) == depth + 1 and names[-1] == "1" and names[0] == ".".join(["0"] * (depth + 1))
    out = tree.map_arrays(lambda a: a + 1, t)
    np.testing.assert_array_equal(out[1], leaves[-1] + 1)
    summed = tree.map(lambda a, b: a - b, out, t)
    assert all(np.array_equal(a, [1.0]) for a in tree.leaves(summed))
    state = optim.setup(optim.Descent(1.0), t)
    grads = tree.map_arrays(np.ones_like, t)
    optim.update(state, t, grads)
    np.testing.assert_array_equal(leaves[0], [-1.0])
    assert len(list(optim.named_state_leaves(state))) == depth + 1


def test_reference_cycles_still_end():
    a = {"w": np.ones(1)}
    a["self"] = a
    assert [name for name, _ in tree.named_leaves(a)] == ["w"]
    out = tree.map_arrays(lambda x: x * 2, a)
    np.testing.assert_array_equal(out["w"], [2.0])
