"""Bad sizes and bad inputs of the layers are one line naming the layer, what was given and what it
takes (not an initialiser's or numpy's message)."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

RNG = np.random.default_rng(0)


def layers():
    return {"Dense(3 => 2)": mf.nn.Dense(3, 2, rng=RNG), "LayerNorm(3)": mf.nn.LayerNorm(3),
            "LSTMCell(3 => 4)": mf.nn.LSTMCell(3, 4, rng=RNG), "GRUCell(3 => 4)": mf.nn.GRUCell(3, 4, rng=RNG)}


@pytest.mark.parametrize("make,message", [
    (lambda: mf.nn.Dense(-3, 2, rng=RNG), "Dense: n_in must be a positive integer, got -3"),
    (lambda: mf.nn.Dense(3, 0, rng=RNG), "Dense: n_out must be a positive integer, got 0"),
    (lambda: mf.nn.Embedding(-1, 2, rng=RNG), "Embedding: vocab_size must be a positive integer, got -1"),
    (lambda: mf.nn.LayerNorm(-4), "LayerNorm: dim must be a positive integer, got -4"),
    (lambda: mf.nn.LSTMCell(3, -1, rng=RNG), "LSTMCell: hidden must be a positive integer, got -1"),
    (lambda: mf.nn.GRUCell(0, 2, rng=RNG), "GRUCell: n_in must be a positive integer, got 0"),
], ids=["Dense n_in", "Dense n_out", "Embedding", "LayerNorm", "LSTMCell", "GRUCell"])
def test_sizes_that_are_not_positive_name_the_layer(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value) == message


@pytest.mark.parametrize("size", [3.0, "3", True], ids=["float", "str", "bool"])
def test_sizes_that_are_not_integers_say_what_was_given(size):
    with pytest.raises(TypeError, match=rf"^Dense: n_in must be a positive integer, got a {type(size).__name__} "):
        mf.nn.Dense(size, 2, rng=RNG)


@pytest.mark.parametrize("name", sorted(layers()))
def test_a_wrong_width_names_the_layer_and_both_widths(name):
    layer = layers()[name]
    with pytest.raises(ValueError) as info:
        layer(np.ones((2, 5)))
    assert str(info.value) == f"{name} expects inputs whose last axis has length 3, got shape (2, 5)"


@pytest.mark.parametrize("name", sorted(layers()))
@pytest.mark.parametrize("bad,given", [("abc", "a str ('abc')"), (None, "None"),
                                       ((np.ones(3), np.ones(3)), "a tuple of 2 items")], ids=["str", "None", "tuple"])
def test_an_input_that_is_not_an_array_says_what_it_was(name, bad, given):
    """A tuple of two (3,) arrays used to be stacked into a (2, 3) batch without a word."""
    with pytest.raises(TypeError) as info:
        layers()[name](bad)
    message = str(info.value)
    assert message.startswith(f"{name} takes inputs as an array or a Tensor of shape (..., 3), got {given}")


def test_embedding_ids_that_are_not_an_array_say_what_they_were():
    emb = mf.nn.Embedding(5, 2, rng=RNG)
    with pytest.raises(TypeError, match=r"^Embedding\(5 => 2\) takes integer ids as an array or a Tensor, "
                                        r"got a tuple of 2 items"):
        emb((1, 2))
    assert emb([1, 2]).shape == (2, 2)


def test_lists_and_arrays_still_work_and_match():
    dense = mf.nn.Dense(3, 2, rng=RNG)
    np.testing.assert_array_equal(dense([1.0, 2.0, 3.0]), dense(np.array([1.0, 2.0, 3.0])))

