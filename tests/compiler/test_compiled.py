"""Compiled functions: argument classification, memoised transforms, bounded caches."""
from __future__ import annotations

import numpy as np
import pytest

from minflux.compiler import arguments
from minflux.compiler import compiled, prepare, primal


def affine(a, x):
    return a * x + 1.0


def test_prepare_classifies_kinds_promotes_floats_and_broadcasts():
    kinds, float_dtype, arrays, shape = prepare(
        [np.ones((2, 1), np.float32), np.arange(3), True, 2.5], "f")
    assert kinds == ("f", "i", "b", "f") and float_dtype == np.float32 and shape == (2, 3)
    assert [a.dtype for a in arrays] == [np.float32, np.int64, np.bool_, np.float32]
    assert prepare([np.ones(2, np.float32), np.ones(2)], "f")[1] == np.float64
    assert prepare([1.0], "f")[1] == np.float64


def test_prepare_names_the_function_and_the_fix():
    with pytest.raises(ValueError, match=r"elementwise function g: cannot broadcast argument shapes \(2,\), \(3,\)"):
        prepare([np.ones(2), np.ones(3)], "g")
    with pytest.raises(TypeError, match="argument 1 of elementwise function g is a str"):
        prepare([1.0, "x"], "g")
    with pytest.raises(TypeError, match="has dtype complex128"):
        prepare([np.ones(2, complex)], "g")


def test_transforms_are_memoised_per_kinds_and_differentiated_arguments():
    cf = compiled(affine)
    assert cf.dual_for(("f", "f"), (1,)) is cf.dual_for(("f", "f"), (1,))
    assert cf.dual_for(("f", "f"), (0,)) is not cf.dual_for(("f", "f"), (1,))
    assert cf.typed_for(("i", "f")).kinds["v_a"] == "i"


def test_primal_runs_without_partials():
    np.testing.assert_array_equal(primal(affine, 2.0, np.arange(3.0)), [1.0, 3.0, 5.0])
    with pytest.raises(TypeError, match="takes 2 argument"):
        primal(affine, 1.0)


def test_shape_keyed_caches_are_bounded():
    assert arguments.broadcast_shape.cache_info().maxsize is not None
    assert arguments.float_dtype_of.cache_info().maxsize is not None
    from minflux.compiler import layout
    assert layout._plan.cache_info().maxsize is not None
