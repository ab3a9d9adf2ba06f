"""The ops' argument values: arrays, Tensors, numbers and nested lists are inputs; a string, None or a
tuple is an error saying what was given (numpy would make a 0-d array or stack the tuple)."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.ops._common import value_of

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


@pytest.mark.parametrize("call", [lambda: mf.sum("abc"), lambda: mf.matmul((np.ones(3), np.ones(3)), np.ones(3)),
                                  lambda: mf.reshape(None, (1,))], ids=["sum str", "matmul tuple", "reshape None"])
def test_ops_refuse_inputs_that_are_not_arrays(call):
    with pytest.raises(TypeError, match=r"^a minflux op got (a str \('abc'\)|a tuple of 2 items|None) where it takes an array"):
        call()


def test_numbers_lists_and_tensors_are_inputs():
    assert float(mf.sum([[1.0, 2.0], [3.0, 4.0]])) == 10.0 and float(mf.sum(2.5)) == 2.5
    np.testing.assert_array_equal(value_of(mf.Tensor(np.ones(2))), np.ones(2))
