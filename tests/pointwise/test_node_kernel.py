"""A broadcast node's gradient sums in one compiled pass: the values of the term-by-term numpy path,
zeros annihilating infinities and NaNs per element, and the numba backend's nodes taking it."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.pointwise import node
from minflux.pointwise.node_kernel import gradient_sums

STRUCTURE = (((0, 0), (1, 1)), ((1, 2),), ((0, 3), (1, 4), (0, 5)))   # three sums over two gradients


def assert_same(a, b):
    """Equal values with zeros' signs equal; NaN equals NaN (a NaN's sign and payload are the CPU's
    choice, which differs between numpy's and LLVM's instruction order)."""
    np.testing.assert_array_equal(a, b)
    zeros = a == 0
    np.testing.assert_array_equal(np.signbit(a[zeros]), np.signbit(b[zeros]))


def numpy_sums(grads, partials, structure):
    """The term-by-term path: each product with a zero annihilating, then added left to right."""
    sums = []
    for terms in structure:
        acc = None
        for g, p in terms:
            term = node._guarded(grads[g], partials[p])
            acc = term if acc is None else acc + term
        sums.append(acc)
    return sums


def arrays(rng, n, shape, dtype, specials: bool):
    out = [rng.standard_normal(shape).astype(dtype) for _ in range(n)]
    if specials:
        for a in out:
            flat = a.reshape(-1)
            picks = rng.integers(0, flat.size, 40)
            flat[picks] = rng.choice(np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e30], dtype), picks.size)
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(32, 128), (7,), (3, 5, 2), (1 << 17) + 5])
@pytest.mark.parametrize("specials", [False, True])
def test_the_kernel_gives_the_term_by_term_values(dtype, shape, specials):
    rng = np.random.default_rng(np.prod(shape) + 7 * specials + np.dtype(dtype).itemsize)
    grads, partials = arrays(rng, 2, shape, dtype, specials), arrays(rng, 6, shape, dtype, specials)
    got = gradient_sums(grads, partials, STRUCTURE)
    with np.errstate(all="ignore"):
        expected = numpy_sums(grads, partials, STRUCTURE)
    for a, b in zip(got, expected):
        assert a.dtype == dtype and a.shape == np.shape(np.empty(shape))
        assert_same(a, b)


def laid_out(a: np.ndarray, how: str) -> np.ndarray:
    """``a``'s values in another layout: the column block of a wider array, or every other row of a
    taller one."""
    if how == "column block":
        wide = np.zeros(a.shape[:-1] + (a.shape[-1] + 5,), a.dtype)
        wide[..., 2:2 + a.shape[-1]] = a
        return wide[..., 2:2 + a.shape[-1]]
    if how == "every other row":
        tall = np.zeros(a.shape[:-2] + (2 * a.shape[-2], a.shape[-1]), a.dtype)
        tall[..., ::2, :] = a
        return tall[..., ::2, :]
    return a


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(32, 128), (3, 4, 6), (5, 1), ((1 << 17) // 64 + 3, 64)])
@pytest.mark.parametrize("how", ["column block", "every other row"])
@pytest.mark.parametrize("in_place", [False, True])
def test_the_kernel_walks_strided_gradients_and_broadcast_partials_by_rows(dtype, shape, how, in_place):
    """Gradients that are views into wider or taller arrays, partials broadcast along the rows, along
    the columns or everywhere: the term-by-term values, zeros' signs and annihilations included."""
    rng = np.random.default_rng(len(shape) + shape[-1])
    grads = [laid_out(g, how) for g in arrays(rng, 2, shape, dtype, True)]
    partials = arrays(rng, 6, shape, dtype, True)
    partials[1] = partials[1][..., :1].copy()                # one value per row
    partials[2] = laid_out(partials[2], how)
    partials[4] = partials[4][(0,) * (len(shape) - 1)].copy()   # one row for all rows
    partials[5] = np.asarray(partials[5].reshape(-1)[0])     # one value for all
    assert node.walk(grads, partials, []).steps is not None
    with np.errstate(all="ignore"):
        expected = numpy_sums(grads, partials, STRUCTURE)
    if in_place:
        partials[0], partials[3] = partials[0].copy(), partials[3].copy()
    got = gradient_sums(grads, partials, STRUCTURE, in_place=in_place)
    for a, b in zip(got, expected):
        assert a.dtype == dtype and a.shape == shape
        assert_same(a, b)


def test_a_layout_that_is_not_rows_a_fixed_stride_apart_is_not_walked():
    g = np.ones((4, 6))
    assert node.walk([g.T], [np.ones((6, 4))], []) is None              # columns a stride apart
    assert node.walk([np.ones((4, 3, 2))[:, ::2]], [np.ones((4, 2, 2))], []) is None   # rows two strides apart
    assert node.walk([g], [g], [np.ones((4, 1))]) is None               # a sum written into fewer elements


@pytest.mark.parametrize("value", [0.25, 0.0, -0.0])
def test_a_broadcast_gradient_is_read_where_it_lies(value):
    """A mean's gradient, one value broadcast over the node's shape, is walked with a step of 0 and
    gives the term-by-term values (a zero gradient annihilating the infinities and NaNs)."""
    rng = np.random.default_rng(9)
    (p,) = arrays(rng, 1, (5, 9), np.float32, True)
    g = np.broadcast_to(np.array(value, np.float32), (5, 9))
    how = node.walk([g], [p], [])
    assert how is not None and how.steps[0] == 0
    (got,) = gradient_sums([g], [p], (((0, 0),),))
    with np.errstate(invalid="ignore"):   # 0 * inf, annihilated
        assert_same(got, numpy_sums([g], [p], (((0, 0),),))[0])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_in_place_each_sum_overwrites_its_first_partial_and_nothing_else(dtype):
    rng = np.random.default_rng(5)
    grads, partials = arrays(rng, 2, (9, 70), dtype, True), arrays(rng, 6, (9, 70), dtype, True)
    copies = [p.copy() for p in partials]
    expected = gradient_sums(grads, copies, STRUCTURE)
    got = gradient_sums(grads, partials, STRUCTURE, in_place=True)
    assert [id(a) for a in got] == [id(partials[terms[0][1]]) for terms in STRUCTURE]
    for a, b in zip(got, expected):
        assert_same(a, b)
    firsts = {terms[0][1] for terms in STRUCTURE}
    for k, (p, original) in enumerate(zip(partials, copies)):
        if k not in firsts:
            np.testing.assert_array_equal(p.view(np.uint8), original.view(np.uint8))


def test_a_zero_annihilates_only_a_product_that_is_not_finite():
    g = np.array([0.0, 0.0, -0.0, 2.0, 0.0])
    p = np.array([np.inf, np.nan, 3.0, np.inf, -5.0])
    (kernel,) = gradient_sums([g], [p], (((0, 0),),))
    expected = np.array([0.0, 0.0, -0.0, np.inf, -0.0])
    np.testing.assert_array_equal(kernel.view(np.uint8), expected.view(np.uint8))
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(node._guarded(g, p).view(np.uint8), expected.view(np.uint8))


def cell(z, c, f, i):
    """Two outputs of four arguments, one of them broadcast over the columns: ten partials' worth."""
    c_new = f * c + i * mf.tanh(c) if z > 0.5 else c + i
    return c_new, mf.tanh(c_new) * f


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_node_with_many_partials_backpropagates_through_the_kernel_as_through_numpy(backend, dtype, monkeypatch):
    rng = np.random.default_rng(3)
    z = rng.random((6, 1)).astype(dtype)
    c, f, i = (rng.standard_normal((6, 9)).astype(dtype) for _ in range(3))
    used = []
    real = node.gradient_sums
    monkeypatch.setattr(node, "gradient_sums", lambda *a, **k: (used.append(1), real(*a, **k))[1])

    def loss(c, f, i):
        a, b = mf.broadcast(cell, z, c, f, i, mode="mixed")
        return mf.sum(a * a) + mf.sum(b * b)   # gradients of both outputs are arrays, not the seed

    got = mf.gradient(loss, c, f, i)
    assert bool(used) == (backend == "numba")
    monkeypatch.setattr(node, "_kernel_walk", lambda *a: None)   # the numpy path
    expected = mf.gradient(loss, c, f, i)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
    # and both are the derivative: float64 central differences
    if dtype == np.float64:
        h = 1e-6
        for k, x in enumerate((c, f, i)):
            e = np.zeros_like(x)
            e[2, 3] = h
            args = [c, f, i]
            plus, minus = list(args), list(args)
            plus[k], minus[k] = x + e, x - e
            numeric = (float(loss(*plus)) - float(loss(*minus))) / (2 * h)
            assert got[k][2, 3] == pytest.approx(numeric, rel=1e-6, abs=1e-8)
