"""Reverse mode returns new arrays, never an input or one result twice."""
import numpy as np
import pytest

import minflux as mf


@pytest.mark.parametrize("mode", ["mixed", "reverse"])
def test_returning_an_argument_gives_a_new_array(mode):
    a = np.ones(3)
    out = mf.broadcast(lambda x: x, a, mode=mode)
    assert not np.shares_memory(out, a)
    out[0] = 5.0
    np.testing.assert_array_equal(a, [1.0, 1.0, 1.0])
    first, second = mf.broadcast(lambda x: (x, x), a, mode=mode)
    assert not np.shares_memory(first, second) and not np.shares_memory(first, a)


@pytest.mark.parametrize("mode", ["mixed", "reverse"])
def test_returning_a_tracked_argument_gives_a_new_tensor(mode):
    a = np.array([1.0, 2.0])

    def loss(x):
        y = mf.broadcast(lambda u: u, x, mode=mode)
        assert y is not x and not np.shares_memory(y.value, x.value)
        return mf.sum(y * y)
    np.testing.assert_allclose(mf.gradient(loss, a)[0], 2 * a)
