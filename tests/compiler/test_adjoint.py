"""The element-local adjoint and the cost model that picks a kernel's AD mode."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import compiled
from minflux.compiler.cost import OUTPUT_STREAM, operation_cost
from minflux.testing import check_grad
from minflux_models.cells import hm_update


def product_of(n: int):
    """``prod_k (x_k if x_k > 0.5 else -x_k)`` of n arguments, as source the compiler can read."""
    args = ", ".join(f"x{k}" for k in range(n))
    body = " * ".join(f"(x{k} if x{k} > 0.5 else -x{k})" for k in range(n))
    namespace: dict = {}
    exec(compile(f"def product({args}):\n    return {body}\n", f"<product{n}>", "exec"), namespace)
    import linecache
    linecache.cache[f"<product{n}>"] = (0, None, [f"def product({args}):\n", f"    return {body}\n"], f"<product{n}>")
    return namespace["product"]


@pytest.mark.parametrize("mode", ["adjoint", "mixed", "reverse"])
@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_untaken_branches_leak_no_nan(backend, mode):
    def f(x, y):
        if x > 0:
            return mf.sqrt(x) * y + mf.log(x)
        return x * y * y

    x = np.array([-2.0, -0.5, 0.0, 0.25, 4.0])
    y = np.array([1.5, -1.0, 2.0, 3.0, -0.5])
    mf.set_elementwise_backend(backend)
    try:
        gx, gy = mf.gradient(lambda x, y: mf.sum(mf.broadcast(f, x, y, mode=mode)), x, y)
    finally:
        mf.set_elementwise_backend("numba")
    pos = x > 0
    safe = np.where(pos, x, 1.0)
    want_x = np.where(pos, 0.5 / np.sqrt(safe) * y + 1 / safe, y * y)
    want_y = np.where(pos, np.sqrt(safe), 2 * x * y)
    np.testing.assert_allclose(gx, want_x, rtol=1e-14)
    np.testing.assert_allclose(gy, want_y, rtol=1e-14)


@pytest.mark.parametrize("n", [1, 3, pytest.param(18, marks=pytest.mark.slow)])  # 18: a large kernel
def test_product_gradients_match_the_closed_form(n):
    rng = np.random.default_rng(n)
    xs = [rng.uniform(-1, 1, (4, 5)) for _ in range(n)]
    f = product_of(n)
    grads = mf.gradient(lambda *xs: mf.sum(mf.broadcast(f, *xs, mode="adjoint")), *xs)
    factors = [np.where(x > 0.5, x, -x) for x in xs]
    total = np.prod(factors, axis=0)
    for x, factor, g in zip(xs, factors, grads):
        np.testing.assert_allclose(g, total / factor * np.where(x > 0.5, 1.0, -1.0), rtol=1e-12)


@pytest.mark.parametrize("mode", ["adjoint", "auto"])
def test_two_outputs_against_finite_differences(mode):
    rng = np.random.default_rng(3)
    z = (rng.random((5, 1)) < 0.4).astype(float)
    zb = (rng.random((5, 1)) < 0.5).astype(float)
    args = [rng.standard_normal((5, 6)) for _ in range(6)]

    def loss(c, h, f, i, o, g):
        c2, h2 = mf.broadcast(hm_update, z, zb, c, h, f, i, o, g, mode=mode)
        return mf.sum(c2 * c2) + mf.sum(h2 * np.linspace(-1, 1, 6))

    assert check_grad(loss, *args) < 1


def test_the_cost_model_picks_the_adjoint_for_wide_products_and_duals_for_sparse_cells():
    n = 18
    wide = compiled(product_of(n))
    kinds, wrt = ("f",) * n, tuple(range(n))
    assert wide.dual_for(kinds, wrt, "auto") is wide.dual_for(kinds, wrt, "adjoint")
    one = compiled(product_of(1))
    assert one.dual_for(("f",), (0,), "auto") is one.dual_for(("f",), (0,), "mixed")


def test_the_cost_model_counts_the_partials_each_mode_writes():
    def shifted_exp(x, y):   # d/dy is 1 on both paths: duals see the constant, the adjoint writes it
        return mf.exp(x) + y if x > 0 else y

    cf = compiled(shifted_exp)
    duals, reverse = cf.dual_for(("f", "f"), (0, 1), "mixed"), cf.dual_for(("f", "f"), (0, 1), "adjoint")
    assert (duals.function.n_outputs, reverse.function.n_outputs) == (2, 3)
    assert operation_cost(reverse) - operation_cost(duals) >= OUTPUT_STREAM
    assert cf.dual_for(("f", "f"), (0, 1), "auto") is duals


def test_functions_with_loops_keep_duals_and_refuse_the_adjoint():
    def halve(x):
        while x > 1:
            x = x / 2
        return x

    x = np.array([0.5, 3.0, 9.0])
    g = mf.gradient(lambda x: mf.sum(mf.broadcast(halve, x)), x)[0]     # auto: duals
    np.testing.assert_allclose(g, [1.0, 0.25, 0.0625])
    with pytest.raises(ValueError, match="without while/for loops"):
        mf.gradient(lambda x: mf.sum(mf.broadcast(halve, x, mode="adjoint")), x)


def test_the_adjoint_never_reuses_a_name_the_function_has():
    """Single assignment renames variables to a<n>; an IR whose own names look like that stays right."""
    import numpy as np

    from minflux.compiler import CompiledFunction
    from minflux.compiler.frontend import Parsed
    from minflux.compiler.ir import Assign, Call, Const, Function, Return, Var

    def build():
        return Function("clash", ["a0", "a1"], [Assign("a2", Call("multiply", (Var("a0"), Const(0.5)))),
                                               Assign("a3", Call("add", (Var("a2"), Var("a1")))),
                                               Return((Var("a3"),))], temps={"a2", "a3"})

    cf = CompiledFunction(None, Parsed(build(), []))
    x, y = np.array([2.0, 4.0]), np.array([1.0, 1.0])
    dual, outs = cf.run([x, y], ("f", "f"), np.float64, (0, 1), (2,), "adjoint")
    np.testing.assert_allclose(outs[0], 0.5 * x + y)
    partials = dict(dual.constants)
    partials.update({slot: out for slot, out in zip(dual.slots, outs[1:])})
    np.testing.assert_allclose(np.broadcast_to(partials[(0, 0)], (2,)), [0.5, 0.5])
    np.testing.assert_allclose(np.broadcast_to(partials[(0, 1)], (2,)), [1.0, 1.0])


def _sqrt_relu(x):
    return mf.sqrt(mf.relu(x))


def _sqrt_square(x):
    return mf.sqrt(x * x)


def _norm(x, y):
    return mf.sqrt(x * x + y * y)


@pytest.mark.parametrize("mode", ["auto", "adjoint", "mixed", "reverse"])
def test_a_zero_partial_annihilates_an_infinite_adjoint(backend, mode):
    """sqrt's partial is inf at 0; the partial it meets there is 0 (relu below 0, 2x at 0): 0, never NaN."""
    x = np.array([-1.0, 0.0, 4.0])
    g = mf.gradient(lambda t: mf.sum(mf.broadcast(_sqrt_relu, t, mode=mode)), x)[0]
    np.testing.assert_array_equal(g, [0.0, 0.0, 0.25])
    g = mf.gradient(lambda t: mf.sum(mf.broadcast(_sqrt_square, t, mode=mode)), x)[0]
    np.testing.assert_array_equal(g, [-1.0, 0.0, 1.0])          # sign(x), with the kink's 0 at 0
    y = np.array([0.0, 0.0, 3.0])
    gx, gy = mf.gradient(lambda a, b: mf.sum(mf.broadcast(_norm, a, b, mode=mode)), x, y)
    np.testing.assert_allclose(gx, [-1.0, 0.0, 0.8], rtol=1e-15)   # x / |(x, y)|, 0 at the origin
    np.testing.assert_allclose(gy, [0.0, 0.0, 0.6], rtol=1e-15)


def test_fused_expressions_agree_with_op_by_op_at_an_infinite_partial():
    """The first call runs op by op, the second fuses (default mode "auto"): the same gradient."""
    xs = np.concatenate([[-1.0, 0.0, 4.0], np.ones(5000)])
    with mf.fusion(compile_after=2):
        for call in range(3):
            g = mf.gradient(lambda t: mf.sum(mf.sqrt(mf.relu(t))), xs)[0]
            np.testing.assert_array_equal(g[:4], [0.0, 0.0, 0.25, 0.5])
