"""A structurally zero gradient is a zero array in every mode and on every call; None only where the
input reaches the result through nothing differentiable."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.compiler.dependence import differentiable_dependence
from minflux.compiler.frontend import parse
from minflux.compiler.kinds import infer_kinds

MODES = ("auto", "mixed", "adjoint", "reverse")


def deps(fn, kinds):
    typed = infer_kinds(parse(fn).function, list(kinds))
    return differentiable_dependence(typed, list(range(len(kinds))))


def test_the_analysis_follows_differentiable_positions_only():
    assert deps(lambda x, y: x * 0.0 + y, "ff") == [frozenset({0, 1})]
    assert deps(lambda x, y: mf.floor(x) * y, "ff") == [frozenset({0, 1})]
    assert deps(lambda x, y: y if x > 0 else 2.0 * y, "ff") == [frozenset({1})]    # x: a condition
    assert deps(lambda x, y: mf.where(x > 0, y, 1.0), "ff") == [frozenset({1})]
    assert deps(lambda x, n: float(n) * x, "fi") == [frozenset({0})]                 # ints: never
    assert deps(lambda x, y: (x > y, x * y), "ff") == [frozenset(), frozenset({0, 1})]

    def looped(x, y):
        a = 1.0
        b = 1.0
        for k in range(3):
            b = a
            a = y * x
        return b

    assert deps(looped, "ff") == [frozenset({0, 1})]   # reaches b through the loop's back edge


STRUCTURAL_ZEROS = {   # loss of (x, y) -> (expected gradient of x, of y), by formula
    "x ** 0": (lambda x, y: mf.sum(x ** 0 * y), lambda x, y: (0 * x, np.ones_like(y))),
    "x * 0.0": (lambda x, y: mf.sum(x * 0.0 + y), lambda x, y: (0 * x, np.ones_like(y))),
    "sign(x) * y": (lambda x, y: mf.sum(mf.sign(x) * y), lambda x, y: (0 * x, np.sign(x))),
    "floor(x) * y": (lambda x, y: mf.sum(mf.floor(x) * y), lambda x, y: (0 * x, np.floor(x))),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL_ZEROS))
def test_fused_and_op_by_op_expressions_give_zero_arrays(name, rng):
    loss, expected = STRUCTURAL_ZEROS[name]
    x, y = rng.uniform(-2, 2, (2, 4096))
    with mf.fusion(compile_after=2, min_elements=1):
        for call in range(3):          # op by op, then fused
            gx, gy = mf.gradient(loss, x, y)
            ex, ey = expected(x, y)
            assert isinstance(gx, np.ndarray) and gx.shape == x.shape and gx.dtype == x.dtype, call
            np.testing.assert_array_equal(gx, ex)
            np.testing.assert_array_equal(gy, ey)
    with mf.fusion(enabled=False):
        gx, _ = mf.gradient(loss, x, y)
        np.testing.assert_array_equal(gx, np.zeros_like(x))


SCALAR_ZEROS = {
    "power": lambda x: x ** 0,
    "times zero": lambda x: x * 0.0,
    "floor": lambda x: mf.floor(x),
    "sign times": lambda x: mf.sign(x) * 2.0 + 1.0,
    "untaken branch": lambda x: x * 3.0 if x > 100 else 1.0,
}


# numba compiles a kernel per function and mode: two functions on numba in the quick subset, all in the full
ZERO_CASES = [pytest.param(backend, name, id=f"{backend}-{name}",
                           marks=[pytest.mark.slow] if backend == "numba" and name not in ("times zero", "untaken branch")
                           else []) for backend in ("numba", "numpy") for name in sorted(SCALAR_ZEROS)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("backend, name", ZERO_CASES, indirect=["backend"])
def test_every_mode_gives_zero_arrays_for_structural_zeros(backend, name, mode):
    fn = SCALAR_ZEROS[name]
    x = np.array([-1.5, 0.0, 2.5], np.float32)
    g = mf.gradient(lambda t: mf.sum(mf.broadcast(fn, t, mode=mode)), x)[0]
    assert isinstance(g, np.ndarray) and g.dtype == np.float32 and g.shape == (3,)
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.0])


@pytest.mark.parametrize("mode", MODES)
def test_an_input_used_only_in_a_condition_gets_none_in_every_mode(mode):
    x, y = np.array([-1.0, 2.0]), np.array([3.0, 4.0])
    gx, gy = mf.gradient(lambda x, y: mf.sum(mf.broadcast(lambda x, y: y if x > 0 else 2.0 * y, x, y,
                                                         mode=mode)), x, y)
    assert gx is None
    np.testing.assert_array_equal(gy, [2.0, 1.0])
    gx, gy = mf.gradient(lambda x, y: mf.sum(mf.where(x > 0, y, 2.0 * y)), x, y)
    assert gx is None


@pytest.mark.parametrize("mode", MODES)
def test_a_loss_that_depends_on_nothing_raises_in_every_mode(mode):
    for fn in (lambda x: 2.0, lambda x: 1.0 if x > 0 else 2.0):
        with pytest.raises(ValueError, match="does not depend on the arguments"):
            mf.gradient(lambda t: mf.sum(mf.broadcast(fn, t, mode=mode)), np.ones(3))
