"""The kernels minflux writes as LLVM IR against numba's compilation of the same functions, bit for bit,
and against numpy where the two differ (the LLVM kernels follow numpy there).

Every row of the derivative table with an LLVM spelling runs on edge values (signed zeros,
infinities, nan, the float32 exponential's clamps, integer extremes) in float32, float64 and int64,
values and gradients; the float32 math is checked on random bit patterns. The generator's own
statements (branches, loops, break/continue, early returns, subroutines) run through
tests/compiler/test_constructs.py and every other kernel test, which use it by default."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import minflux as mf
from minflux.compiler.rules import TABLE
from minflux.runtime import settings

EDGES = [-np.inf, -1e30, -104.5, -88.8, -10.0, -2.5, -1.0, -0.5, -1e-30, -0.0, 0.0, 1e-30, 0.3, 0.5,
         1.0, 2.5, 9.6, 30.0, 88.8, 89.5, 1e30, np.inf, np.nan]
FEW = [-np.inf, -2.5, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0, np.inf, np.nan]
INTS = [-2**63, -7, -3, -1, 0, 1, 2, 7, 2**63 - 1]
SPELLED = sorted(name for name, p in TABLE.items() if p.llvm is not None)
INT_SPELLED = sorted(name for name, p in TABLE.items() if p.llvm_int is not None and p.result != "bool"
                     and name != "where")
LOGICAL = {"logical_not", "logical_and", "logical_or"}


def scalar_function(op, arity):
    """A scalar function whose body is one call of ``op`` (a fresh closure per op)."""
    if arity == 1:
        return lambda x: op(x)
    if arity == 2:
        return lambda a, b: op(a, b)
    return lambda a, b, c: op(a, b, c)


def grid(values, arity, dtype):
    columns = zip(*itertools.product(values, repeat=arity))
    return [np.array(c, dtype=dtype) for c in columns]


def run(compiler, fn, args, monkeypatch, differentiate):
    """The values of ``fn`` broadcast over ``args`` and, with ``differentiate``, the gradients of their
    sum in the float arguments, with CPU kernels compiled by ``compiler``."""
    monkeypatch.setitem(settings._values, "kernel_compiler", compiler)
    value = mf.broadcast(fn, *args)
    if not differentiate:
        return [value]
    floats = [k for k, a in enumerate(args) if a.dtype.kind == "f"]

    def total(*xs):
        full = list(args)
        for k, x in zip(floats, xs):
            full[k] = x
        return mf.sum(mf.broadcast(fn, *full))

    return [value, *mf.gradient(total, *[args[k] for k in floats])]


def same_bits(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        assert (nan == np.isnan(b)).all()
        return np.array_equal(a[~nan].view(np.uint8), b[~nan].view(np.uint8)) if a.size else True
    return np.array_equal(a, b)


def arguments(name, dtype):
    arity = TABLE[name].arity
    if name == "where":
        cond, a, b = grid([True, False], 1, bool)[0], *grid(FEW, 2, dtype)
        cond = np.resize(cond, a.shape)
        return [cond, a, b]
    if name in LOGICAL:
        return grid([True, False], arity, bool)
    return grid(EDGES if arity == 1 else FEW, arity, dtype)


@pytest.mark.slow   # numba compiles a kernel per primitive and type: half a minute
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", SPELLED)
def test_each_spelled_primitive_gives_the_bits_numba_gives(name, dtype, monkeypatch):
    prim = TABLE[name]
    if name in LOGICAL and dtype == np.float32:
        pytest.skip("bools only")
    fn = scalar_function(getattr(mf, name) if hasattr(mf, name) else _row_function(name), prim.arity)
    args = arguments(name, dtype)
    differentiate = prim.differentiable and name not in LOGICAL
    with np.errstate(all="ignore"):
        ours = run("llvm", fn, args, monkeypatch, differentiate)
        numbas = run("numba", fn, args, monkeypatch, differentiate)
        reference = prim.impl(np, *args)
    for k, (a, b) in enumerate(zip(ours, numbas)):
        if k == 0 and name in NUMPY_NOT_NUMBA:
            # numba differs from numpy here; the LLVM kernel gives numpy's value
            differ = ~np.array([same_bits(x, y) for x, y in zip(a.ravel(), b.ravel())])
            expected = np.asarray(reference, dtype=a.dtype).ravel()
            assert all(same_bits(x, y) for x, y in zip(a.ravel()[differ], expected[differ])), name
            continue
        if k > 0 and name in SIGN_IN_GRADIENT:   # sign(-0.0): numba's -0.0, numpy's (and ours) 0.0
            np.testing.assert_array_equal(a, b)
            continue
        assert same_bits(a, b), (name, k, args, a, b)


# numba's np.sign(-0.0) is -0.0 and its float floor division by zero nan: numpy gives 0.0 and inf
NUMPY_NOT_NUMBA = {"sign", "floor_divide"}
SIGN_IN_GRADIENT = {"abs"}


def _row_function(name):
    prim = TABLE[name]
    return lambda *a: prim.impl(np, *a)


@pytest.mark.slow
@pytest.mark.parametrize("name", INT_SPELLED)
def test_each_integer_primitive_gives_the_bits_numba_gives(name, monkeypatch):
    prim = TABLE[name]
    fn = scalar_function(getattr(mf, name), prim.arity)
    values = INTS if prim.arity < 3 else [-3, 0, 2, 7]
    args = grid(values, prim.arity, np.int64)
    with np.errstate(all="ignore"):
        ours = run("llvm", fn, args, monkeypatch, False)[0]
        numbas = run("numba", fn, args, monkeypatch, False)[0]
        reference = prim.impl(np, *args)
    np.testing.assert_array_equal(ours, np.asarray(reference, dtype=ours.dtype))
    numba_right = numbas == reference       # numba's -2**63 // -1 is 0, numpy's (and ours) -2**63
    assert numba_right.all() or name == "floor_divide"
    np.testing.assert_array_equal(ours[numba_right], numbas[numba_right])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["exp", "expm1", "log", "log1p", "tanh", "sigmoid", "softplus"])
def test_the_float32_math_is_numbas_to_the_bit_on_random_bit_patterns(name, monkeypatch):
    """The LLVM helpers are `minflux.compiler.fastmath`'s operations in its order (its accuracy
    tests then hold for both)."""
    from minflux.compiler import fastmath

    rng = np.random.default_rng(3)
    x = rng.integers(0, 2**32, size=200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([x, np.float32([0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 88.72, -103.9])])
    fn = scalar_function(getattr(mf, name), 1)
    with np.errstate(all="ignore"):
        ours = run("llvm", fn, [x], monkeypatch, False)[0]
        reference = np.array([getattr(fastmath, f"{name}_f32")(v) for v in x[::97]], dtype=np.float32)
    assert same_bits(ours[::97], reference)
    with np.errstate(all="ignore"):
        numbas = run("numba", fn, [x], monkeypatch, False)[0]
    assert same_bits(ours, numbas)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", SPELLED)
def test_each_spelled_primitive_gives_numpys_values_at_the_edges(name, dtype, monkeypatch):
    prim = TABLE[name]
    if name in LOGICAL and dtype == np.float32:
        pytest.skip("bools only")
    args = arguments(name, dtype)
    with np.errstate(all="ignore"):
        ours = run("llvm", scalar_function(getattr(mf, name), prim.arity), args, monkeypatch, False)[0]
        reference = np.asarray(ACCURATE.get(name, prim.impl)(np, *args))
    if reference.dtype.kind == "f":
        reference = reference.astype(ours.dtype)
        ulps = 4 if dtype == np.float32 else 2       # the float32 math's stated bound; libm's
        tolerance = ulps * np.finfo(dtype).eps * np.abs(reference)
        with np.errstate(invalid="ignore"):     # inf - inf where both are infinite
            close = np.abs(ours.astype(np.float64) - reference) <= tolerance
        same = (ours == reference) | (np.isnan(ours) & np.isnan(reference)) | close
        assert same.all(), (name, [a[~same] for a in args], ours[~same], reference[~same])
        if name not in TIES:
            zero = ours == 0
            assert (np.signbit(ours[zero]) == np.signbit(reference[zero])).all(), name
    else:
        np.testing.assert_array_equal(ours, reference)


# the row's own formula, 0.5 tanh(x / 2) + 0.5, is 0 where the logistic is a tiny positive number
ACCURATE = {"sigmoid": lambda xp, x: (1 / (1 + np.exp(-x.astype(np.longdouble)))).astype(x.dtype)}
# a tie of two zeros gives the first argument (the table's convention); numpy's SIMD loops the second
TIES = {"maximum", "minimum", "clip", "relu"}
