"""take_along_axis: values against numpy, gradients (repeated picks add up) against finite differences."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


@pytest.mark.parametrize("shape,index_shape,axis", [((3, 4), (3, 2), 1), ((3, 4), (5, 4), 0),
                                                    ((3, 4), (1, 6), 1), ((2, 3, 4), (2, 3, 1), -1),
                                                    ((2, 1, 4), (2, 3, 4), 1), ((6,), (4,), None),
                                                    ((2, 3), (7,), None)], ids=str)
def test_take_along_axis(shape, index_shape, axis, rng):
    x = rng.standard_normal(shape)
    length = x.size if axis is None else shape[axis]
    idx = rng.integers(-length, length, index_shape)   # negative indices and repeats included
    flat_x = x.reshape(-1) if axis is None else x
    want = np.take_along_axis(flat_x, idx, axis=0 if axis is None else axis)
    got = mf.take_along_axis(x, idx, axis=axis)
    np.testing.assert_array_equal(got, want)
    weights = rng.standard_normal(want.shape)
    check_grad(lambda x: mf.sum(mf.take_along_axis(x, idx, axis=axis) * weights), x)


def test_take_along_axis_needs_matching_rank():
    with pytest.raises(ValueError, match="need the rank"):
        mf.take_along_axis(np.ones((2, 3)), np.array([0, 1]), axis=1)
    with pytest.raises(TypeError, match="integers"):
        mf.take_along_axis(np.ones((2, 3)), np.zeros((2, 1)), axis=1)
