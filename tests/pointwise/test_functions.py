"""The public API: backend choice, errors, outputs, custom scalar rules, inlining, the CUDA hook."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad


def test_backend_switch_and_bad_names():
    assert mf.get_elementwise_backend() == "numba"
    with pytest.raises(ValueError, match="unknown elementwise backend 'cuda'.*MINFLUX_ELEMENTWISE"):
        mf.set_elementwise_backend("cuda")
    mf.set_elementwise_backend("numpy")
    try:
        assert mf.get_elementwise_backend() == "numpy"
    finally:
        mf.set_elementwise_backend("numba")


def test_environment_variable_selects_the_backend():
    import subprocess
    import sys
    code = "import minflux as mf; print(mf.get_elementwise_backend())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**__import__("os").environ, "MINFLUX_ELEMENTWISE": "numpy"})
    assert out.stdout.strip() == "numpy"


def test_mode_and_argument_errors():
    x = np.ones(3)
    with pytest.raises(ValueError, match="mode must be one of 'auto', 'mixed', 'adjoint', 'reverse'"):
        mf.broadcast(lambda x: x, x, mode="forward")
    with pytest.raises(TypeError, match="takes 2 argument"):
        mf.broadcast(lambda x, y: x + y, x)
    with pytest.raises(ValueError, match=r"cannot broadcast argument shapes \(3,\), \(4,\)"):
        mf.broadcast(lambda x, y: x + y, x, np.ones(4))
    with pytest.raises(TypeError, match="argument 0 .* is a list"):
        mf.broadcast(lambda x: x, [1.0, 2.0])
    with pytest.raises(TypeError, match="dtype complex128"):
        mf.broadcast(lambda x: x, np.ones(2, complex))


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_several_outputs_int_and_bool_inputs_and_outputs(backend):
    mf.set_elementwise_backend(backend)
    try:
        def f(x, n, flag):
            y = x * n if flag else x - n
            return y, y > 1, n * 2
        x = np.array([0.5, 1.5, 2.5])
        n = np.array([1, 2, 3])
        flag = np.array([True, False, True])
        y, big, n2 = mf.broadcast(f, x, n, flag)
        np.testing.assert_array_equal(y, [0.5, -0.5, 7.5])
        assert big.dtype == bool and list(big) == [False, False, True]
        assert n2.dtype == np.int64 and list(n2) == [2, 4, 6]
        gx = mf.gradient(lambda x: mf.sum(mf.broadcast(f, x, n, flag)[0]), x)[0]
        np.testing.assert_array_equal(gx, [1.0, 1.0, 3.0])
    finally:
        mf.set_elementwise_backend("numba")


def test_python_numbers_as_arguments_and_dtypes():
    x32 = np.ones(2, np.float32)
    assert mf.broadcast(lambda a, x: a * x, 2.5, x32).dtype == np.float32
    assert mf.broadcast(lambda a, x: a * x, 2.5, np.ones(2, np.float64)).dtype == np.float64
    out = mf.broadcast(lambda a, b: a + b, 1.0, 2.0)
    assert out.shape == () and float(out) == 3.0
    assert mf.broadcast(lambda n: n / 2, np.array([1, 2])).dtype == np.float64


@mf.scalar_rule(lambda m, x, a, y: m.where(abs(x) < 1 / a, a / 2, 0.0))
def hard_step(x, a):
    if x > 0:
        return 1.0
    return 0.0


@mf.elementwise
def gate(x, a, h):
    z = hard_step(x, a)
    return z * h + (1 - z) * 0.5


def test_scalar_rule_inside_an_elementwise_function_uses_the_rule():
    x = np.array([-0.3, 0.2, 0.9, 3.0])
    h = np.array([2.0, 3.0, 4.0, 5.0])
    for backend in ("numpy", "numba"):
        mf.set_elementwise_backend(backend)
        try:
            np.testing.assert_array_equal(gate(x, 2.0, h), [0.5, 3.0, 4.0, 5.0])
            gx, gh = mf.gradient(lambda x, h: mf.sum(gate(x, 2.0, h)), x, h)
            # d/dx = (h - 0.5) * (a/2 where |x| < 1/a) ; |x| < 0.5 for the first two elements
            np.testing.assert_allclose(gx, [1.5, 2.5, 0.0, 0.0])
            np.testing.assert_array_equal(gh, [0.0, 1.0, 1.0, 1.0])
            rev = mf.gradient(lambda x, h: mf.sum(gate(x, 2.0, h, mode="reverse")), x, h)
            np.testing.assert_allclose(rev[0], gx)
        finally:
            mf.set_elementwise_backend("numba")


def test_scalar_rule_called_on_arrays_and_broadcast_directly():
    x = np.array([-0.3, 0.2, 0.9])
    np.testing.assert_array_equal(hard_step(x, 1.0), [0.0, 1.0, 1.0])
    g1 = mf.gradient(lambda x: mf.sum(hard_step(x, 1.0)), x)[0]
    g2 = mf.gradient(lambda x: mf.sum(mf.broadcast(hard_step, x, 1.0)), x)[0]
    np.testing.assert_allclose(g1, [0.5, 0.5, 0.5])
    np.testing.assert_allclose(g2, g1)
    with pytest.raises(TypeError, match="2 derivative rules .* takes 1"):
        mf.scalar_rule(lambda m, x, y: 1, lambda m, x, y: 2)(lambda x: x)


def test_scalar_rule_must_return_one_value():
    @mf.scalar_rule(lambda m, x, y: 1.0)
    def pair(x):
        return x, x

    @mf.elementwise
    def uses_pair(x):
        return pair(x)

    with pytest.raises(mf.CompileError, match="must return one value"):
        uses_pair(np.ones(2))


@mf.elementwise
def clamp_early(u):
    if u > 1:
        return 1.0
    k = 0
    while k < 3:
        if u < -1:
            return -1.0 - k * 0.0
        k += 1
    return u * u


@mf.elementwise
def calls_clamp(x, y):
    a = clamp_early(x)
    b = clamp_early(y * 0.5)
    return a * y + b


def test_inlined_callee_with_early_returns_in_loops():
    x = np.array([2.0, -2.0, 0.5, 0.3])
    y = np.array([1.0, 3.0, -3.0, 0.4])
    want = np.array([1.0 * 1 + 0.25, -1.0 * 3 + 1.0, 0.25 * -3 - 1.0, 0.09 * 0.4 + 0.04])
    for backend in ("numpy", "numba"):
        mf.set_elementwise_backend(backend)
        try:
            np.testing.assert_allclose(calls_clamp(x, y), want)
            check_grad(lambda x, y: mf.sum(calls_clamp(x, y)), x, y)
        finally:
            mf.set_elementwise_backend("numba")


def test_decorated_function_keeps_name_and_doc():
    @mf.elementwise
    def documented(x):
        """Doubles."""
        return 2 * x
    assert documented.__name__ == "documented" and documented.__doc__ == "Doubles."
    assert "elementwise" in repr(documented) and "documented" in repr(documented)


def test_tensor_inputs_outside_gradient_give_tensors():
    out = mf.broadcast(lambda x: x + 1, mf.Tensor(np.zeros(2)))
    assert isinstance(out, mf.Tensor)


def test_untaken_sqrt_branch_leaks_no_nan_in_any_mode():
    xs = np.array([-4.0, -1.0, 4.0])
    f = lambda x: x if x < 0 else mf.sqrt(x)  # noqa: E731
    for mode in ("mixed", "reverse"):
        grad = mf.gradient(lambda x: mf.sum(mf.broadcast(f, x, mode=mode)), xs)[0]
        np.testing.assert_allclose(grad, [1.0, 1.0, 0.25], err_msg=mode)
