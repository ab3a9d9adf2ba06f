"""Every construct of the scalar language on every CPU backend: values and gradients.

Gradients are checked against central finite differences in float64 and against ``mode="reverse"``
(the same scalar function run op by op on the tape); the numba backend must agree with the numpy
reference to rounding, in float64 and in float32.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad

from broadcast_programs import CASES

IDS = [c.name for c in CASES]


def _outputs(fn, args, mode="mixed"):
    out = fn(*args, mode=mode)
    return list(out) if isinstance(out, tuple) else [out]


def _loss_and_positions(case, args, rng):
    """A scalar loss over all outputs with random weights, differentiable in the float arguments."""
    floats = [k for k, (kind, _, _) in enumerate(case.args) if kind == "f"]
    n_out = len(_outputs(case.fn, args))
    weights = [rng.standard_normal(args[0].shape) for _ in range(n_out)]

    def loss(*float_args, mode="mixed"):
        full = list(args)
        for k, a in zip(floats, float_args):
            full[k] = a
        outs = case.fn(*full, mode=mode)
        outs = outs if isinstance(outs, tuple) else (outs,)
        total = 0.0
        for o, w in zip(outs, weights):
            total = total + mf.sum(o * w)
        return total

    return loss, [args[k] for k in floats]


# numba's values and gradients are checked against numpy's below; against finite differences too (slow)
@pytest.mark.parametrize("backend", [pytest.param("numba", marks=pytest.mark.slow), "numpy"], indirect=True)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_gradient_matches_finite_differences(case, backend):
    rng = np.random.default_rng(0)
    args = case.draw(rng)
    loss, float_args = _loss_and_positions(case, args, rng)
    check_grad(loss, *float_args, rtol=1e-5, atol=1e-7)


@pytest.mark.numpy_kernels  # the modes, not the backend: numba agrees with numpy below
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_mixed_mode_matches_reverse_mode(case):
    rng = np.random.default_rng(1)
    args = case.draw(rng)
    loss, float_args = _loss_and_positions(case, args, rng)
    mixed = mf.gradient(loss, *float_args)
    reverse = mf.gradient(lambda *a: loss(*a, mode="reverse"), *float_args)
    for gm, gr in zip(mixed, reverse):
        # an untaken branch's nan (sqrt of a negative) reaches neither mode: zero factors annihilate
        assert np.all(np.isfinite(gm)) and np.all(np.isfinite(gr))
        np.testing.assert_allclose(gm, gr, rtol=1e-10, atol=1e-12)
    values_mixed = _outputs(case.fn, args)
    values_reverse = _outputs(case.fn, args, mode="reverse")
    for vm, vr in zip(values_mixed, values_reverse):
        np.testing.assert_allclose(vm, vr, rtol=1e-12, atol=1e-14)


def _partials(case, args, outputs: str = "alone"):
    """Outputs and per-element gradients of the summed outputs, on the current backend; the outputs of
    a call outside the gradient (``outputs="alone"``: a kernel without partials) or those of the
    gradient's kernel (``outputs="with gradients"``)."""
    floats = [k for k, (kind, _, _) in enumerate(case.args) if kind == "f"]

    def total(*float_args):
        full = list(args)
        for k, a in zip(floats, float_args):
            full[k] = a
        outs = case.fn(*full)
        outs = outs if isinstance(outs, tuple) else (outs,)
        return (sum(mf.sum(o) for o in outs), *outs)

    value, grads = mf.withgradient(total, *[args[k] for k in floats])
    return (_outputs(case.fn, args) if outputs == "alone" else list(value[1:])), grads


# The quick subset compiles each construct's kernel with partials in float64, and the branches (selects)
# in float32 (the vectorisable float32 math is compiled in the quick subset by the float32 cell update
# and activation tests); the kernels without partials, and float32 for every construct, compile in the
# full suite.
FLOAT32_QUICK = {"branches"}
DTYPE_CASES = [pytest.param(case, dtype, outputs, id=f"{case.name}-{np.dtype(dtype).name}-{outputs}",
                            marks=[] if outputs == "with gradients" else [pytest.mark.slow])
               for case in CASES for dtype in (np.float64, np.float32) for outputs in ("alone", "with gradients")
               if outputs == "alone" or dtype == np.float64 or case.name in FLOAT32_QUICK]


@pytest.mark.parametrize("case, dtype, outputs", DTYPE_CASES)
def test_numba_agrees_with_numpy(case, dtype, outputs):
    args = case.draw(np.random.default_rng(2), dtype=dtype)
    results = {}
    for name in ("numpy", "numba"):
        mf.set_elementwise_backend(name)
        try:
            results[name] = _partials(case, args, outputs)
        finally:
            mf.set_elementwise_backend("numba")
    rtol, atol = (1e-12, 1e-13) if dtype == np.float64 else (2e-5, 2e-6)
    (out_np, grad_np), (out_nb, grad_nb) = results["numpy"], results["numba"]
    for a, b in zip(out_np, out_nb):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol)
    for a, b in zip(grad_np, grad_nb):
        assert a.dtype == b.dtype == dtype
        np.testing.assert_allclose(b, a, rtol=rtol * 10, atol=atol * 10)
