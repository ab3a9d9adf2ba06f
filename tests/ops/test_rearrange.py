"""pad, tile, repeat, flip, roll, moveaxis, flatten: values against numpy, gradients against
finite differences (each output element weighted differently, so a misrouted gradient shows)."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def check(op, np_op, x, rng):
    want = np_op(x)
    got = op(x)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)
    weights = rng.standard_normal(np.shape(want))
    check_grad(lambda x: mf.sum(op(x) * weights), x)


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("shape,width", [((4,), (2, 3)), ((3, 4), ((1, 2), (3, 0))), ((3, 4), 2),
                                         ((2, 3, 2), ((0, 1), (2, 2), (1, 1)))], ids=str)
def test_pad(mode, shape, width, rng):
    x = rng.standard_normal(shape)
    check(lambda x: mf.pad(x, width, mode=mode), lambda x: np.pad(x, width, mode=mode), x, rng)


def test_pad_with_a_constant_value_and_unknown_modes(rng):
    x = rng.standard_normal(3)
    np.testing.assert_array_equal(mf.pad(x, 1, constant_values=5.0), np.pad(x, 1, constant_values=5.0))
    with pytest.raises(ValueError, match="mode must be one of"):
        mf.pad(x, 1, mode="mean")


@pytest.mark.parametrize("shape,reps", [((3,), 2), ((3,), (2, 2)), ((2, 3), (1, 3)), ((2, 3), 2),
                                        ((2, 1, 3), (2, 2, 1, 2))], ids=str)
def test_tile(shape, reps, rng):
    check(lambda x: mf.tile(x, reps), lambda x: np.tile(x, reps), rng.standard_normal(shape), rng)


@pytest.mark.parametrize("shape,repeats,axis", [((3,), 2, None), ((2, 3), 2, None), ((2, 3), 3, 1),
                                                ((2, 3), [1, 0, 2], 1), ((3, 2), [2, 2, 1], 0),
                                                ((2, 3), [1, 2, 3, 0, 1, 1], None)], ids=str)
def test_repeat(shape, repeats, axis, rng):
    check(lambda x: mf.repeat(x, repeats, axis=axis), lambda x: np.repeat(x, repeats, axis=axis),
          rng.standard_normal(shape), rng)


def test_repeat_rejects_a_wrong_number_of_counts():
    with pytest.raises(ValueError, match="3 repeat counts for axis 0 of length 2"):
        mf.repeat(np.ones((2, 2)), [1, 2, 3], axis=0)


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 2), -1])
def test_flip(axis, rng):
    check(lambda x: mf.flip(x, axis), lambda x: np.flip(x, axis), rng.standard_normal((2, 3, 4)), rng)


@pytest.mark.parametrize("shift,axis", [(1, None), (-2, None), (1, 0), (2, -1), ((1, -1), (0, 2)), (5, 1)])
def test_roll(shift, axis, rng):
    check(lambda x: mf.roll(x, shift, axis), lambda x: np.roll(x, shift, axis), rng.standard_normal((2, 3, 4)),
          rng)


@pytest.mark.parametrize("source,destination", [(0, -1), (-1, 0), ((0, 1), (2, 0)), (1, 1)])
def test_moveaxis(source, destination, rng):
    check(lambda x: mf.moveaxis(x, source, destination), lambda x: np.moveaxis(x, source, destination),
          rng.standard_normal((2, 3, 4)), rng)


@pytest.mark.parametrize("start,end,shape", [(0, -1, (24,)), (1, -1, (2, 12)), (0, 1, (6, 4)), (1, 1, (2, 3, 4))])
def test_flatten(start, end, shape, rng):
    check(lambda x: mf.flatten(x, start, end), lambda x: x.reshape(shape), rng.standard_normal((2, 3, 4)), rng)


def test_flatten_rejects_reversed_axes():
    with pytest.raises(ValueError, match="comes after"):
        mf.flatten(np.ones((2, 3)), 1, 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rearranging_keeps_the_dtype(dtype):
    x = np.ones((2, 3), dtype)
    for op in (lambda x: mf.pad(x, 1, mode="wrap"), lambda x: mf.tile(x, 2), lambda x: mf.repeat(x, [1, 2], 0),
               mf.flip, lambda x: mf.roll(x, 1), lambda x: mf.moveaxis(x, 0, 1), mf.flatten):
        assert op(x).dtype == dtype
        assert mf.gradient(lambda x: mf.sum(op(x)), x)[0].dtype == dtype
