"""Every way of evaluating an elementwise function gives the same value, the same kind of gradient
(an array or None) and the same gradient, at exact zeros, kinks and domain edges too: the four
kernel modes of `mf.broadcast`, op-by-op evaluation (fusion off) and fused expressions. Wherever
any of them gives a finite gradient, every one does."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

BROADCAST_MODES = ("auto", "mixed", "adjoint", "reverse")

# functions of (x, y) written with mf.* only, so each runs as a scalar function and as array code
FUNCTIONS = {
    "sqrt(relu(x))": lambda x, y: mf.sqrt(mf.relu(x)),
    "sqrt(x*x)": lambda x, y: mf.sqrt(x * x),
    "sqrt(x*x + y*y)": lambda x, y: mf.sqrt(x * x + y * y),
    "sqrt(x) at its edge": lambda x, y: mf.sqrt(mf.relu(x)) * y + mf.sqrt(x * x + 1.0),
    "hypot": lambda x, y: mf.hypot(x, y),
    "atan2": lambda x, y: mf.atan2(x, y),
    "abs(x) * y": lambda x, y: mf.abs(x) * y,
    "max and min": lambda x, y: mf.maximum(x, y) - 2.0 * mf.minimum(x, y),
    "clip": lambda x, y: mf.clip(x, 0.0, 1.0) * y,
    "x ** 0": lambda x, y: x ** 0 + y,
    "x ** 2.5": lambda x, y: mf.relu(x) ** 2.5,
    "x ** y": lambda x, y: mf.relu(x) ** mf.abs(y),
    "x * 0": lambda x, y: x * 0.0 + y,
    "sign(x) * y": lambda x, y: mf.sign(x) * y,
    "floor(x) * y": lambda x, y: mf.floor(x) * y,
    "relu(x) * log(relu(y) + 1)": lambda x, y: mf.relu(x) * mf.log(mf.relu(y) + 1.0),
    "where(x > 0, sqrt(x), y)": lambda x, y: mf.where(x > 0, mf.sqrt(mf.abs(x)), y * y),
    "tanh(x / y)": lambda x, y: mf.tanh(x * y) * mf.sigmoid(x - y),
}
GRID = np.array([-1.0, 0.0, 1.0, 2.0])
X, Y = (a.ravel() for a in np.meshgrid(GRID, GRID))


def evaluate(fn, how: str):
    """(value, (gx, gy)) of sum(fn) evaluated the way ``how`` names."""
    if how in BROADCAST_MODES:
        out = lambda x, y: mf.broadcast(fn, x, y, mode=how)
        with mf.fusion(enabled=False):
            return mf.withgradient(lambda x, y: (mf.sum(out(x, y)), out(x, y)), X, Y)
    settings = {"enabled": False} if how == "op by op" else {"compile_after": 1, "min_elements": 1}
    with mf.fusion(**settings):
        return mf.withgradient(lambda x, y: (mf.sum(fn(x, y)), fn(x, y)), X, Y)


# numba on every function is slow (a kernel per function and mode); the quick subset keeps the edges
# of sqrt, where and pow on numba, and every function on numpy
QUICK_ON_NUMBA = {"sqrt(x) at its edge", "where(x > 0, sqrt(x), y)", "x ** y"}
CASES = [pytest.param(backend, name, marks=[pytest.mark.slow] if backend == "numba" and name not in QUICK_ON_NUMBA
                      else []) for backend in ("numba", "numpy") for name in sorted(FUNCTIONS)]


@pytest.mark.parametrize("backend, name", CASES, indirect=["backend"])
def test_every_mode_agrees_at_zeros_kinks_and_edges(backend, name):
    fn = FUNCTIONS[name]
    results = {how: evaluate(fn, how) for how in BROADCAST_MODES + ("op by op", "fused", "fused again")}
    (_, reference), grads = results["op by op"]
    for how, ((_, value), g) in results.items():
        np.testing.assert_allclose(value, reference, rtol=1e-13, atol=1e-15, err_msg=how)
        for k in range(2):
            assert (g[k] is None) == (grads[k] is None), (how, k)
    for k in range(2):
        if grads[k] is None:
            continue
        stack = np.stack([g[k] for _, g in results.values()])
        anywhere_finite = np.isfinite(stack).any(axis=0)
        assert np.isfinite(stack[:, anywhere_finite]).all(), \
            {how: g[k][anywhere_finite] for how, (_, g) in results.items()}
        for (how, (_, g)) in results.items():
            np.testing.assert_allclose(g[k], grads[k], rtol=1e-13, atol=1e-15, err_msg=f"{how}, d/d{'xy'[k]}")


@pytest.mark.numpy_kernels  # the math; numba's kernels agree with op-by-op evaluation above
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_the_functions_match_finite_differences_away_from_their_kinks(name):
    fn = FUNCTIONS[name]
    x = np.array([0.35, 1.4, 0.8])      # no kink, edge or zero within the step of any function here
    y = np.array([0.6, -0.45, 1.7])
    for mode in ("mixed", "adjoint"):
        check_grad(lambda x, y: mf.sum(mf.broadcast(fn, x, y, mode=mode)), x, y)
