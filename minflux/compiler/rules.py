"""The derivative table: every scalar primitive and its one derivative rule.

Each primitive has an array implementation ``impl(xp, *args)`` and, per argument, a partial derivative
``d(m, *args, y)`` written with operators and ``m.<primitive>(...)`` calls, where ``y`` is the
primitive's output. The same rule is evaluated on arrays (``m`` is `ArrayMath`) by the tape and on
symbolic scalars by the broadcast compiler's forward-mode transform, so both agree everywhere,
kinks included. A rule that returns a Python number is a constant partial and is never materialised.

Conventions at kinks: ``relu'(0) = 0``, ``abs'(0) = sign(0) = 0``, ``maximum``/``minimum`` ties give
the whole derivative to the first argument, ``clip`` passes the gradient to ``x`` on the closed
interval ``[lo, hi]``; ``sign``, ``floor``, ``floor_divide`` and comparisons have zero or no derivative.

Conventions at singular points, the same in every mode (mixed-mode kernels, ``mode="reverse"``, the
tape's broadcast nodes):

* A zero factor annihilates: wherever a derivative is propagated as a product -- a rule times an
  incoming tangent in forward mode (`minflux.compiler.dual`), a cotangent times a partial on the tape
  (`minflux.pointwise.node`) -- ``0 * inf`` and ``0 * nan`` are 0. A value that does not depend on an
  input on some lane (a loop that ran zero times, a branch-local variable on a lane that skipped the
  branch, a where-select's untaken side) therefore contributes exactly nothing there, even where the
  rule it meets is infinite (``sqrt`` or ``log`` at 0) or undefined. This is the NaN-safe mode of
  ForwardDiff.jl applied in both directions, so forward and reverse products agree.
* ``x ** k`` with ``k == 0`` has derivative 0 in ``x`` everywhere, ``x = 0`` included (the
  integer-power answer of PyTorch and JAX, not ``0 * 0 ** -1``).
* ``hypot`` and ``atan2`` at the origin have zero partials (the kink convention of ``abs``:
  ``hypot(v, v) = sqrt(2) |v|``), so ``hypot(0, 0)`` where both arguments are locally constant, or
  with equal tangents, gives 0, never NaN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Primitive:
    """A scalar primitive: its array implementation and one partial-derivative rule per argument.

    ``partials[k]`` is None when argument ``k`` is not differentiable (conditions, comparisons).

    >>> from minflux.compiler.rules import TABLE
    >>> TABLE["tanh"].arity
    1
    """

    name: str
    arity: int
    impl: Callable
    partials: tuple
    doc: str = ""

    @property
    def differentiable(self) -> bool:
        return any(p is not None for p in self.partials)


TABLE: dict[str, Primitive] = {}


def define(name: str, impl: Callable, *partials, doc: str = "") -> Primitive:
    """Add a primitive to the table (the way the library and users define scalar derivatives).

    >>> import numpy as np
    >>> from minflux.compiler.rules import define, TABLE
    >>> p = define("cube", lambda xp, x: x * x * x, lambda m, x, y: 3 * x * x)
    >>> TABLE["cube"].partials[0](None, np.float64(2.0), None)
    np.float64(12.0)
    >>> del TABLE["cube"]
    """
    prim = Primitive(name, len(partials), impl, tuple(partials), doc)
    TABLE[name] = prim
    return prim


class ArrayMath:
    """The namespace ``m`` of derivative rules when they are evaluated on arrays of module ``xp``.

    >>> import numpy as np
    >>> ArrayMath(np).tanh(np.zeros(1))
    array([0.])
    """

    def __init__(self, xp):
        self.xp = xp

    def __getattr__(self, name):
        prim = TABLE.get(name)
        if prim is None:
            raise AttributeError(f"no primitive named {name!r} in the derivative table")
        xp = self.xp
        return lambda *args: prim.impl(xp, *args)


def _sigmoid(xp, x):
    return 0.5 * xp.tanh(0.5 * x) + 0.5


def _clip(xp, x, lo, hi):
    return xp.minimum(xp.maximum(x, lo), hi)


def _where(xp, c, a, b):
    return xp.where(c, a, b)


def _step(m, c):
    """1 where ``c`` holds, else 0 (a non-differentiable indicator)."""
    return m.where(c, 1.0, 0.0)


def _off_origin(m, denominator, numerator):
    """``numerator / denominator``, and 0 where the denominator is 0 (the origin of hypot, atan2)."""
    return m.where(denominator > 0, numerator / denominator, 0.0)


# arithmetic
define("add", lambda xp, a, b: a + b, lambda m, a, b, y: 1, lambda m, a, b, y: 1)
define("subtract", lambda xp, a, b: a - b, lambda m, a, b, y: 1, lambda m, a, b, y: -1)
define("multiply", lambda xp, a, b: a * b, lambda m, a, b, y: b, lambda m, a, b, y: a)
define("divide", lambda xp, a, b: a / b, lambda m, a, b, y: 1 / b, lambda m, a, b, y: -y / b)
define("power", lambda xp, a, b: a ** b,
       lambda m, a, b, y: m.where(b == 0, 0.0, b * a ** (b - 1)),
       lambda m, a, b, y: m.where(a > 0, y * m.log(m.where(a > 0, a, 1.0)), 0.0),
       doc="d/db a**b = a**b log a for a > 0 and 0 otherwise")
define("floor_divide", lambda xp, a, b: xp.floor_divide(a, b), lambda m, a, b, y: 0, lambda m, a, b, y: 0)
define("mod", lambda xp, a, b: xp.mod(a, b), lambda m, a, b, y: 1, lambda m, a, b, y: -m.floor(a / b))
define("negative", lambda xp, x: -x, lambda m, x, y: -1)
define("abs", lambda xp, x: xp.abs(x), lambda m, x, y: m.sign(x))
define("sign", lambda xp, x: xp.sign(x), lambda m, x, y: 0)
define("floor", lambda xp, x: xp.floor(x), lambda m, x, y: 0)
define("maximum", lambda xp, a, b: xp.maximum(a, b),
       lambda m, a, b, y: _step(m, a >= b), lambda m, a, b, y: _step(m, a < b))
define("minimum", lambda xp, a, b: xp.minimum(a, b),
       lambda m, a, b, y: _step(m, a <= b), lambda m, a, b, y: _step(m, a > b))
define("clip", _clip,
       lambda m, x, lo, hi, y: _step(m, x >= lo) * _step(m, x <= hi),
       lambda m, x, lo, hi, y: _step(m, x < lo),
       lambda m, x, lo, hi, y: _step(m, x > hi) * _step(m, x >= lo))
# transcendental
define("exp", lambda xp, x: xp.exp(x), lambda m, x, y: y)
define("log", lambda xp, x: xp.log(x), lambda m, x, y: 1 / x)
define("log1p", lambda xp, x: xp.log1p(x), lambda m, x, y: 1 / (1 + x))
define("expm1", lambda xp, x: xp.expm1(x), lambda m, x, y: y + 1)
define("sqrt", lambda xp, x: xp.sqrt(x), lambda m, x, y: 0.5 / y)
define("sin", lambda xp, x: xp.sin(x), lambda m, x, y: m.cos(x))
define("cos", lambda xp, x: xp.cos(x), lambda m, x, y: -m.sin(x))
define("tanh", lambda xp, x: xp.tanh(x), lambda m, x, y: 1 - y * y)
define("sigmoid", _sigmoid, lambda m, x, y: y * (1 - y))
define("relu", lambda xp, x: xp.maximum(x, 0), lambda m, x, y: _step(m, x > 0))
define("softplus", lambda xp, x: xp.logaddexp(0, x), lambda m, x, y: m.sigmoid(x))
# the rest of Python's math module that scalar functions may call
define("tan", lambda xp, x: xp.tan(x), lambda m, x, y: 1 + y * y)
define("asin", lambda xp, x: xp.arcsin(x), lambda m, x, y: 1 / m.sqrt(1 - x * x))
define("acos", lambda xp, x: xp.arccos(x), lambda m, x, y: -1 / m.sqrt(1 - x * x))
define("atan", lambda xp, x: xp.arctan(x), lambda m, x, y: 1 / (1 + x * x))
define("sinh", lambda xp, x: xp.sinh(x), lambda m, x, y: m.cosh(x))
define("cosh", lambda xp, x: xp.cosh(x), lambda m, x, y: m.sinh(x))
define("asinh", lambda xp, x: xp.arcsinh(x), lambda m, x, y: 1 / m.sqrt(x * x + 1))
define("acosh", lambda xp, x: xp.arccosh(x), lambda m, x, y: 1 / m.sqrt(x * x - 1))
define("atanh", lambda xp, x: xp.arctanh(x), lambda m, x, y: 1 / (1 - x * x))
define("log2", lambda xp, x: xp.log2(x), lambda m, x, y: 1.4426950408889634 / x)
define("log10", lambda xp, x: xp.log10(x), lambda m, x, y: 0.4342944819032518 / x)
define("atan2", lambda xp, a, b: xp.arctan2(a, b),
       lambda m, a, b, y: _off_origin(m, a * a + b * b, b),
       lambda m, a, b, y: _off_origin(m, a * a + b * b, -a))
define("hypot", lambda xp, a, b: xp.hypot(a, b),
       lambda m, a, b, y: _off_origin(m, y, a), lambda m, a, b, y: _off_origin(m, y, b))
_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(xp, x):
    """The error function on arrays: libm's erf per element on the host, CuPy's kernel on a GPU."""
    if xp is np:
        out = _ERF(x)
        dtype = getattr(x, "dtype", np.dtype(np.float64))
        return np.asarray(out, dtype=dtype if np.dtype(dtype).kind == "f" else np.float64)[()]
    import cupyx.scipy.special

    return cupyx.scipy.special.erf(x)


define("erf", _erf, lambda m, x, y: 1.1283791670955126 * m.exp(-(x * x)))   # 2 / sqrt(pi) exp(-x^2)
define("ceil", lambda xp, x: xp.ceil(x), lambda m, x, y: 0)
define("trunc", lambda xp, x: xp.trunc(x), lambda m, x, y: 0)
# selection and comparisons (conditions carry no derivative)
define("where", _where, None, lambda m, c, a, b, y: _step(m, c), lambda m, c, a, b, y: 1 - _step(m, c))
define("less", lambda xp, a, b: a < b, None, None)
define("less_equal", lambda xp, a, b: a <= b, None, None)
define("greater", lambda xp, a, b: a > b, None, None)
define("greater_equal", lambda xp, a, b: a >= b, None, None)
define("equal", lambda xp, a, b: a == b, None, None)
define("not_equal", lambda xp, a, b: a != b, None, None)
define("logical_not", lambda xp, x: xp.logical_not(x), None)
define("logical_and", lambda xp, a, b: xp.logical_and(a, b), None, None)
define("logical_or", lambda xp, a, b: xp.logical_or(a, b), None, None)
