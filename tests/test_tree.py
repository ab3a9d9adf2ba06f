"""Tree walking: leaves, containers, configuration, tied arrays, cycles and ``trainable``."""
from __future__ import annotations

from collections import namedtuple

import numpy as np
import pytest

import minflux as mf
from minflux import tree


class Box:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_named_leaves_walks_every_container():
    w = np.ones(1)
    model = Box(layers=[Box(W=w, act=np.tanh), {"b": np.zeros(2)}], pair=(np.ones(3), "name"), tied=w)
    names = [name for name, _ in tree.named_leaves(model)]
    assert names == ["layers.0.W", "layers.1.b", "pair.0"]
    assert len(tree.leaves(model)) == 3


def test_trainable_hides_other_attributes_from_parameters_only():
    class Norm:
        trainable = ("gamma",)

        def __init__(self):
            self.gamma, self.stats = np.ones(2), np.zeros(2)

    m = Norm()
    assert [n for n, _ in tree.named_leaves(m)] == ["gamma"]
    assert [n for n, _ in tree.named_leaves(m, trainable_only=False)] == ["gamma", "stats"]
    doubled = tree.map_arrays(lambda a: a + 1, m)
    np.testing.assert_array_equal(doubled.stats, [1.0, 1.0])


def test_map_arrays_rebuilds_without_modifying_and_keeps_ties():
    w = np.ones(2)
    Pair = namedtuple("Pair", "a b")
    model = {"x": [w, w], "p": Pair(w, 3), "cfg": {"lr": 0.1}}
    out = tree.map_arrays(lambda a: a * 2, model)
    assert out["x"][0] is out["x"][1] is out["p"].a
    assert isinstance(out["p"], Pair) and out["p"].b == 3
    assert out["cfg"] is model["cfg"]  # containers without leaves are shared, not copied
    np.testing.assert_array_equal(model["x"][0], [1.0, 1.0])


@pytest.mark.parametrize("fn", [lambda a: a * 2, lambda a: a], ids=["new arrays", "the same arrays"])
def test_a_tuple_of_arrays_and_one_array_map_as_any_other_tree(fn):
    """The walk's shortcuts for the commonest arguments (one array, a tuple of arrays) give what the
    general walk gives a list of the same arrays: a tied array maps once, and a tree whose arrays
    all map to themselves comes back as itself."""
    w, v = np.ones(2), np.zeros(3)
    calls = []

    def counted(a):
        calls.append(a)
        return fn(a)

    args = (w, v, w)
    out = tree.map_arrays(counted, args)
    general = tree.map_arrays(fn, [w, v, w])
    assert len(calls) == 2 and type(out) is tuple and out[0] is out[2]
    assert all(np.array_equal(a, b) for a, b in zip(out, general))
    assert (out is args) == (general[0] is w) and (out is args) == (fn(w) is w)
    mapped = tree.map_arrays(counted, w)
    assert len(calls) == 3 and np.array_equal(mapped, fn(w)) and (mapped is w) == (fn(w) is w)
    assert tree.map_arrays(fn, (), static=lambda x: "static") == "static"   # no leaf: configuration


def test_cycles_terminate():
    a = Box(w=np.ones(1))
    a.me = a
    assert len(tree.leaves(a)) == 1
    out = tree.map_arrays(lambda x: x * 0, a)
    assert out.w[0] == 0


def test_static_replacement():
    cfg = Box(n=3, names=["a"])
    out = tree.map_arrays(lambda a: a, Box(w=np.ones(1), f=np.tanh, g=len, n=3, cfg=cfg), static=lambda v: None)
    assert out.f is None and out.g is None and out.n is None and out.cfg is None and out.w[0] == 1
    assert np.tanh.__module__ == "numpy" and cfg.n == 3


def test_objects_that_copy_to_themselves_are_not_modified():
    class Singleton:
        def __init__(self):
            self.w = np.ones(1)

        def __copy__(self):
            return self

    s = Singleton()
    with pytest.raises(TypeError, match="cannot rebuild a Singleton"):
        tree.map_arrays(lambda a: a * 0, s)
    assert s.w[0] == 1


def test_tensors_are_leaves():
    t = mf.Tensor(np.ones(2))
    assert tree.is_leaf(t) and tree.leaves([t]) == [t]
    assert tree.children(t) is None
