"""If-conversion: straight-line code with selects that equals the branching function on every lane."""
from __future__ import annotations

import numpy as np
import pytest

from minflux.compiler.dual import differentiate
from minflux.compiler.frontend import parse
from minflux.compiler.ifconvert import if_convert
from minflux.compiler.ir import If, Loop, walk
from minflux.compiler.kinds import infer_kinds
from minflux.compiler.numpy_backend import ArrayOps, evaluate


def piecewise(x, y):
    if x > 0:
        if y > x:
            return x * y, y
        z = x - y
    elif y < -1:
        return -x, y * y
    else:
        z = x * 0.5
    return z + 1.0, z * y


@pytest.mark.parametrize("wrt", [(), (0,), (0, 1)])
def test_converted_function_equals_the_branching_one_on_every_lane(wrt):
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=200) * 2, rng.normal(size=200) * 2
    fn = differentiate(infer_kinds(parse(piecewise).function, ["f", "f"]), list(wrt)).function
    straight = if_convert(fn)
    assert not any(isinstance(s, (If, Loop)) for s in walk(straight.body))
    ops = ArrayOps(np, np.float64)
    branching = evaluate(fn, [x, y], ops)
    converted = evaluate(straight, [x, y], ops)
    for a, b in zip(branching, converted):
        np.testing.assert_array_equal(np.broadcast_to(a, x.shape), np.broadcast_to(b, x.shape))
    values = np.array([piecewise(a, b) for a, b in zip(x, y)])  # plain Python on each lane
    np.testing.assert_allclose(converted[0], values[:, 0])
    np.testing.assert_allclose(converted[1], values[:, 1])


def test_a_function_with_loops_is_refused():
    def loop(x):
        while x > 1:
            x = x / 2
        return x

    with pytest.raises(ValueError, match="loop-free"):
        if_convert(infer_kinds(parse(loop).function, ["f"]))
