"""Every row of the derivative table, through every path: the public ``mf.<name>`` op on the tape,
a scalar function calling it compiled by the numba and numpy backends (mixed mode), and reverse mode.
Values match the row's numpy implementation; gradients match float64 central differences of it."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.compiler.rules import TABLE

POINTS = np.array([0.3, 0.55, 0.8])
# arguments for primitives whose domain or differentiability needs other points
SPECIAL = {
    "acosh": [np.array([1.3, 1.8, 2.5])],
    "power": [POINTS, np.array([1.2, 1.7, 2.1])],
    "atan2": [POINTS, np.array([1.2, -1.7, 2.1])],
    "hypot": [POINTS, np.array([1.2, -1.7, 2.1])],
    "mod": [POINTS, np.array([1.2, 1.7, 2.1])],
    "floor_divide": [np.array([1.3, 2.55, 3.8]), np.array([1.2, 1.7, 2.1])],
    "maximum": [POINTS, np.array([0.5, 0.4, 1.0])],
    "minimum": [POINTS, np.array([0.5, 0.4, 1.0])],
    "divide": [POINTS, np.array([1.2, -1.7, 2.1])],
    "where": [np.array([True, False, True]), POINTS, np.array([1.2, -1.7, 2.1])],
    "clip": [np.array([0.1, 0.5, 0.9]), 0.3, 0.7],
    "logical_not": [np.array([True, False, True])],
    "logical_and": [np.array([True, False, True]), np.array([True, True, False])],
    "logical_or": [np.array([True, False, False]), np.array([False, False, True])],
}
PUBLIC = sorted(name for name in TABLE if "." not in name)  # user rules are module-qualified


def arguments(name):
    if name in SPECIAL:
        return list(SPECIAL[name])
    return [POINTS * (k + 1) for k in range(TABLE[name].arity)]


def scalar_function(op, arity):
    """A scalar function whose body is one call of ``op`` (a fresh closure per op)."""
    if arity == 1:
        return lambda x: op(x)
    if arity == 2:
        return lambda a, b: op(a, b)
    return lambda a, b, c: op(a, b, c)


def finite_difference(name, args, k, eps=1e-6):
    impl = TABLE[name].impl
    up = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    down = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    up[k] = up[k] + eps
    down[k] = down[k] - eps
    return (impl(np, *up) - impl(np, *down)) / (2 * eps)


def differentiable_positions(name, args):
    prim = TABLE[name]
    return [k for k in range(prim.arity)
            if prim.partials[k] is not None and isinstance(args[k], np.ndarray) and args[k].dtype.kind == "f"]


PATHS = {
    "tape": lambda op, name, args: op(*args),
    "numba": lambda op, name, args: mf.broadcast(scalar_function(op, TABLE[name].arity), *args),
    "numpy": lambda op, name, args: mf.broadcast(scalar_function(op, TABLE[name].arity), *args),
    "reverse": lambda op, name, args: mf.broadcast(scalar_function(op, TABLE[name].arity), *args,
                                                   mode="reverse"),
}


@pytest.fixture(params=sorted(PATHS))
def path(request):
    backend = "numpy" if request.param == "numpy" else "numba"
    mf.set_elementwise_backend(backend)
    yield request.param
    mf.set_elementwise_backend("numba")


@pytest.mark.parametrize("name", PUBLIC)
def test_every_primitive_is_a_public_op(name):
    op = getattr(mf, name)
    assert op.__primitive__ == name and name in mf.__all__


# primitives whose numba spelling the quick subset compiles in tests/compiler/test_constructs.py's
# programs (in float64 and float32); here they compile on numba one by one only in the full suite
IN_THE_CONSTRUCTS = {"abs", "add", "asinh", "atan", "atan2", "clip", "cos", "cosh", "divide", "equal", "exp",
                     "expm1", "floor_divide", "greater", "hypot", "less", "less_equal", "log", "log10",
                     "log1p", "log2", "logical_and", "logical_not", "logical_or", "maximum", "minimum",
                     "mod", "multiply", "negative", "power", "relu", "sigmoid", "sin", "sinh", "softplus",
                     "sqrt", "subtract", "tan", "tanh", "where"}
PATH_CASES = [pytest.param(name, path, id=f"{path}-{name}",
                           marks=[pytest.mark.slow] if path == "numba" and name in IN_THE_CONSTRUCTS else [])
              for path in sorted(PATHS) for name in PUBLIC]


@pytest.mark.parametrize("name, path", PATH_CASES, indirect=["path"])
def test_value_and_gradient_on_every_path(name, path):
    op = getattr(mf, name)
    args = arguments(name)
    run = PATHS[path]
    expected = TABLE[name].impl(np, *args)
    np.testing.assert_allclose(np.asarray(run(op, name, args)), expected, rtol=1e-12, atol=1e-14)
    positions = differentiable_positions(name, args)
    if not positions:
        return
    grads = mf.gradient(lambda *xs: mf.sum(run(op, name, list(xs))), *args)
    for k in positions:
        g = np.zeros_like(args[k]) if grads[k] is None else grads[k]  # None: no dependence at all
        np.testing.assert_allclose(g, finite_difference(name, args, k), rtol=1e-6, atol=1e-8,
                                   err_msg=f"d {name} / d argument {k} on the {path} path")
