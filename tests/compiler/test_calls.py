"""Calls inside scalar functions: callees recognised by protocol, and inlined bodies that live in
their own name space whatever names the caller uses."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.compiler.errors import CompileError


@mf.elementwise
def constant_helper(u):
    return 0.5


@mf.elementwise
def pair_helper(u, v):
    return (0.5, 0.5)


def test_an_inlined_helper_cannot_overwrite_a_caller_variable_with_its_suffixed_name():
    def prog(x0):
        u_2 = 0.5
        x0 = constant_helper(0.5)
        x0 = constant_helper(1.165)
        return u_2

    for backend in ("numba", "numpy"):
        mf.set_elementwise_backend(backend)
        try:
            np.testing.assert_array_equal(mf.broadcast(prog, np.array([3.0, 4.0])), [0.5, 0.5])
        finally:
            mf.set_elementwise_backend("numba")


def test_an_inlined_helper_cannot_leak_a_dependence_into_a_caller_variable():
    def prog(x1, x0):
        u_1 = 0.0
        x0, a_2 = pair_helper(x1, 0.5)
        return u_1

    x1, x0 = np.array([0.3, 2.0]), np.array([1.0, 1.0])
    for mode in ("mixed", "reverse"):
        value, (g1, _) = mf.withgradient(  # the zero term keeps a loss that depends on nothing on the tape
            lambda a, b: mf.sum(mf.broadcast(prog, a, b, mode=mode)) + 0.0 * mf.sum(a), x1, x0)
        assert float(value) == 0.0
        assert g1 is None or not g1.any()   # the result does not depend on x1


def test_nested_helpers_with_the_same_local_names_stay_apart():
    @mf.elementwise
    def inner(u):
        t = u * 2.0
        return t

    @mf.elementwise
    def outer(u):
        t = inner(u) + 1.0
        return t * u

    def prog(t):
        u = outer(t)
        return u + t

    x = np.array([1.0, 2.0])
    np.testing.assert_allclose(mf.broadcast(prog, x), (2 * x + 1) * x + x)
    (g,) = mf.gradient(lambda x: mf.sum(mf.broadcast(prog, x)), x)
    np.testing.assert_allclose(g, 4 * x + 1 + 1)


class Squared:
    """Any object can be inlined by giving the Python scalar function it stands for."""

    def __init__(self):
        self.__scalar_function__ = lambda v: v * v


class NamedPrimitive:
    __primitive__ = "tanh"


def test_callees_are_recognised_by_protocol():
    squared, named = Squared(), NamedPrimitive()
    x = np.array([0.5, -1.0])
    np.testing.assert_allclose(mf.broadcast(lambda v: squared(v) + named(v), x), x * x + np.tanh(x))


def test_a_protocol_name_outside_the_table_is_a_compile_error():
    class Bogus:
        __primitive__ = "no_such_primitive"

    bogus = Bogus()
    with pytest.raises(CompileError, match="a call to bogus"):
        mf.broadcast(lambda v: bogus(v), np.ones(2))


def test_math_log_with_a_base_and_builtins():
    import math

    x = np.array([2.0, 8.0])
    np.testing.assert_allclose(mf.broadcast(lambda v: math.log(v, 2) + max(v, 3.0, 1.0), x),
                               np.log2(x) + np.maximum(x, 3.0))
