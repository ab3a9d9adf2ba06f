"""The derivative table: every scalar primitive and its one derivative rule.

Each primitive has an array implementation ``impl(xp, *args)`` and, per argument, a partial derivative
``d(m, *args, y)`` written with operators and ``m.<primitive>(...)`` calls, where ``y`` is the
primitive's output. The same rule is evaluated on arrays (``m`` is `ArrayMath`) by the tape and on
symbolic scalars by the compiler's forward-mode transform (`minflux.compiler.dual`), so both agree everywhere,
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

from .source import free_name_bindings


RESULTS = ("float", "arith", "select", "where", "bool")
"""Result-kind rules: always float; integer unless an argument is float (arith); the join of the
arguments (select) or of the two values (where); always bool (comparisons, logic)."""


@dataclass(frozen=True)
class Primitive:
    """A scalar primitive: one row holding everything every part of minflux knows about it.

    * ``impl(xp, *args)``: the array implementation (the tape, the numpy backend, ``m.<name>``);
    * ``partials[k](m, *args, y)``: the derivative in argument ``k``, or None where ``k`` is not
      differentiable (conditions, comparisons);
    * ``result``: the result-kind rule (one of `RESULTS`);
    * ``cost``: time per element relative to one ``add`` in a compiled kernel (the AD-mode cost
      model, `minflux.compiler.cost`; measured by ``benchmarks/cost_weights.py``);
    * ``finite``: the result is finite whenever the arguments are (the element-local adjoint skips
      its guard for such values, `minflux.compiler.adjoint`);
    * ``numba`` / ``numba_f32``: the numba backend's spelling, a ``str.format`` template of the
      argument expressions ``{0}, {1}, ...`` (``_F`` is the kernel's float type), and an optional
      vectorisable float32 form;
    * ``llvm`` / ``llvm_int``: the LLVM backend's spelling, one LLVM instruction on the operand values
      ``{0}, {1}, ...`` (``{t}`` is their LLVM type, ``{tag}`` ``f32``, ``f64`` or ``i64``, ``{s}``
      the C library suffix ``f`` or nothing), for floats and bools, and for 64-bit integers; the
      helpers ``@minflux_...`` it may call are `minflux.compiler.llvm_math`'s;
    * ``cuda`` / ``cuda_fast32`` / ``cuda_int``: the CUDA C spelling for floats (``{t}`` is the C
      float type, ``{s}`` the libm suffix ``f`` or nothing, ``{tag}`` ``f32`` or ``f64``), an
      optional fast-math float32 form, and the spelling for 64-bit integers.

    A backend without a spelling for a row refuses it with a `CompileError` naming the primitive.

    >>> from minflux.compiler.rules import TABLE
    >>> TABLE["tanh"].arity, TABLE["tanh"].numba_f32
    (1, 'tanh_f32({0})')
    """

    name: str
    arity: int
    impl: Callable
    partials: tuple
    doc: str = ""
    result: str = "float"
    cost: float = 1.0
    finite: bool = False
    numba: str | None = None
    numba_f32: str | None = None
    llvm: str | None = None
    llvm_int: str | None = None
    cuda: str | None = None
    cuda_fast32: str | None = None
    cuda_int: str | None = None

    @property
    def differentiable(self) -> bool:
        return any(p is not None for p in self.partials)

    def bindings(self) -> list:
        """The free names this row's derivative rules read when a kernel expands them, as
        `Binding`s (`minflux.compiler.source`): code that calls the row is compiled again once one
        has another value. minflux's own rows read nothing that changes.

        >>> rule = eval("lambda m, x, y: m.where(x < LIMIT, 1.0, 0.0)", {"__name__": "experiment", "LIMIT": 0.5})
        >>> [(b.name, b.value) for b in Primitive("example", 1, None, (rule,)).bindings()]
        [('LIMIT', 0.5)]
        """
        return [b for rule in self.partials if not _own(rule) for b in free_name_bindings(rule)]


TABLE: dict[str, Primitive] = {}


def _own(rule) -> bool:
    return (getattr(rule, "__module__", None) or "").split(".", 1)[0] == "minflux"


def define(name: str, impl: Callable, *partials, doc: str = "", **row) -> Primitive:
    """Add a primitive to the table: one row (the way the library and users define primitives).

    ``row`` takes the `Primitive` fields after ``doc``: ``result``, ``cost``, ``finite`` and the
    backends' spellings.

    >>> import numpy as np
    >>> from minflux.compiler.rules import define, TABLE
    >>> p = define("cube", lambda xp, x: x * x * x, lambda m, x, y: 3 * x * x, numba="({0} * {0} * {0})")
    >>> TABLE["cube"].partials[0](None, np.float64(2.0), None)
    np.float64(12.0)
    >>> del TABLE["cube"]
    """
    if name in TABLE:   # kernels and fused structures already built under the name would keep the old row
        raise ValueError(f"define({name!r}): a primitive of that name exists; give the new one its own name")
    if row.get("result", "float") not in RESULTS:
        raise ValueError(f"define({name!r}): result must be one of {RESULTS}, got {row['result']!r}")
    prim = Primitive(name, len(partials), impl, tuple(partials), doc, **row)
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


def _power_base_partial(m, a, b):
    """d/da a**b = b a**(b - 1), and 0 where b is 0. For a constant exponent other than 0 the choice
    is made now: the product itself, the values and float dtype ``where`` would copy it into.

    >>> import numpy as np
    >>> _power_base_partial(ArrayMath(np), np.array([3.0]), 2), _power_base_partial(ArrayMath(np), 3.0, np.zeros(1))
    (array([6.]), array([0.]))
    """
    partial = b * a ** (b - 1)
    if (b.__class__ is int or b.__class__ is float) and b != 0 and getattr(partial, "dtype", None) is not None \
            and partial.dtype.kind == "f":
        return partial
    return m.where(b == 0, 0.0, partial)


def _off_origin(m, denominator, numerator):
    """``numerator / denominator``, and 0 where the denominator is 0 (the origin of hypot, atan2)."""
    return m.where(denominator > 0, numerator / denominator, 0.0)


# arithmetic
_WRAP = "minflux_wrap_i64((unsigned long long)({0}) %s (unsigned long long)({1}))"
define("add", lambda xp, a, b: a + b, lambda m, a, b, y: 1, lambda m, a, b, y: 1, result="arith",
       finite=True, llvm="fadd {t} {0}, {1}", llvm_int="add {t} {0}, {1}", numba="({0} + {1})",
       cuda="({0} + {1})", cuda_int=_WRAP % "+")
define("subtract", lambda xp, a, b: a - b, lambda m, a, b, y: 1, lambda m, a, b, y: -1, result="arith",
       finite=True, llvm="fsub {t} {0}, {1}", llvm_int="sub {t} {0}, {1}", numba="({0} - {1})",
       cuda="({0} - {1})", cuda_int=_WRAP % "-")
define("multiply", lambda xp, a, b: a * b, lambda m, a, b, y: b, lambda m, a, b, y: a, result="arith",
       finite=True, llvm="fmul {t} {0}, {1}", llvm_int="mul {t} {0}, {1}", numba="({0} * {1})",
       cuda="({0} * {1})", cuda_int=_WRAP % "*")
define("divide", lambda xp, a, b: a / b, lambda m, a, b, y: 1 / b, lambda m, a, b, y: -y / b, cost=2.5,
       llvm="fdiv {t} {0}, {1}", numba="({0} / {1})", cuda="({0} / {1})", cuda_fast32="__fdividef({0}, {1})")
define("power", lambda xp, a, b: a ** b, lambda m, a, b, y: _power_base_partial(m, a, b),
       lambda m, a, b, y: m.where(a > 0, y * m.log(m.where(a > 0, a, 1.0)), 0.0),
       doc="d/db a**b = a**b log a for a > 0 and 0 otherwise", cost=220.0,
       llvm="call {t} @llvm.pow.{tag}({t} {0}, {t} {1})", numba="_F({0} ** {1})", cuda="pow{s}({0}, {1})")
define("floor_divide", lambda xp, a, b: xp.floor_divide(a, b), lambda m, a, b, y: 0, lambda m, a, b, y: 0,
       result="arith", cost=210.0, llvm="call {t} @minflux_floordiv_{tag}({t} {0}, {t} {1})",
       llvm_int="call {t} @minflux_floordiv_{tag}({t} {0}, {t} {1})", numba="({0} // {1})",
       cuda="minflux_floordiv_{tag}({0}, {1})",
       cuda_int="minflux_floordiv_i64({0}, {1})")
define("mod", lambda xp, a, b: xp.mod(a, b), lambda m, a, b, y: 1, lambda m, a, b, y: -m.floor(a / b),
       result="arith", cost=215.0, llvm="call {t} @minflux_mod_{tag}({t} {0}, {t} {1})",
       llvm_int="call {t} @minflux_mod_{tag}({t} {0}, {t} {1})", numba="({0} % {1})",
       cuda="minflux_mod_{tag}({0}, {1})",
       cuda_int="minflux_mod_i64({0}, {1})")
define("negative", lambda xp, x: -x, lambda m, x, y: -1, result="arith", finite=True, llvm="fneg {t} {0}",
       llvm_int="sub {t} 0, {0}", numba="(-{0})",
       cuda="(-{0})", cuda_int="minflux_wrap_i64(0ULL - (unsigned long long)({0}))")
define("abs", lambda xp, x: xp.abs(x), lambda m, x, y: m.sign(x), result="arith", finite=True,
       llvm="call {t} @llvm.fabs.{tag}({t} {0})", llvm_int="call {t} @minflux_abs_i64({t} {0})",
       numba="abs({0})", cuda="fabs{s}({0})", cuda_int="minflux_abs_i64({0})")
define("sign", lambda xp, x: xp.sign(x), lambda m, x, y: 0, result="arith", finite=True,
       llvm="call {t} @minflux_sign_{tag}({t} {0})", llvm_int="call {t} @minflux_sign_{tag}({t} {0})",
       numba="np.sign({0})", cuda="minflux_sign_{tag}({0})", cuda_int="minflux_sign_i64({0})")
define("floor", lambda xp, x: xp.floor(x), lambda m, x, y: 0, finite=True,
       llvm="call {t} @llvm.floor.{tag}({t} {0})", numba="np.floor({0})",
       cuda="floor{s}({0})")
define("maximum", lambda xp, a, b: xp.maximum(a, b),
       lambda m, a, b, y: _step(m, a >= b), lambda m, a, b, y: _step(m, a < b), result="select",
       finite=True, llvm="call {t} @minflux_max_{tag}({t} {0}, {t} {1})",
       llvm_int="call {t} @llvm.smax.i64({t} {0}, {t} {1})", numba="_max({0}, {1})",
       cuda="minflux_max_{tag}({0}, {1})",
       cuda_int="(({0} >= {1}) ? {0} : {1})")
define("minimum", lambda xp, a, b: xp.minimum(a, b),
       lambda m, a, b, y: _step(m, a <= b), lambda m, a, b, y: _step(m, a > b), result="select",
       finite=True, llvm="call {t} @minflux_min_{tag}({t} {0}, {t} {1})",
       llvm_int="call {t} @llvm.smin.i64({t} {0}, {t} {1})", numba="_min({0}, {1})",
       cuda="minflux_min_{tag}({0}, {1})",
       cuda_int="(({0} <= {1}) ? {0} : {1})")
define("clip", _clip,
       lambda m, x, lo, hi, y: _step(m, x >= lo) * _step(m, x <= hi),
       lambda m, x, lo, hi, y: _step(m, x < lo),
       lambda m, x, lo, hi, y: _step(m, x > hi) * _step(m, x >= lo), result="select", finite=True,
       llvm="call {t} @minflux_clip_{tag}({t} {0}, {t} {1}, {t} {2})",
       llvm_int="call {t} @minflux_clip_{tag}({t} {0}, {t} {1}, {t} {2})", numba="_min(_max({0}, {1}), {2})",
       cuda="minflux_min_{tag}(minflux_max_{tag}({0}, {1}), {2})",
       cuda_int="(((({0} >= {1}) ? {0} : {1}) <= {2}) ? (({0} >= {1}) ? {0} : {1}) : {2})")
# transcendental (numba_f32: the vectorisable float32 forms of `minflux.compiler.fastmath`)
define("exp", lambda xp, x: xp.exp(x), lambda m, x, y: y, cost=16.0,
       llvm="call {t} @minflux_exp_{tag}({t} {0})", numba="_F(math.exp({0}))",
       numba_f32="exp_f32({0})", cuda="exp{s}({0})", cuda_fast32="__expf({0})")
define("log", lambda xp, x: xp.log(x), lambda m, x, y: 1 / x, cost=18.0,
       llvm="call {t} @minflux_log_{tag}({t} {0})", numba="_F(_log64({0}))",
       numba_f32="log_f32({0})", cuda="log{s}({0})", cuda_fast32="__logf({0})")
define("log1p", lambda xp, x: xp.log1p(x), lambda m, x, y: 1 / (1 + x), cost=21.0,
       llvm="call {t} @minflux_log1p_{tag}({t} {0})", numba="_F(_log1p64({0}))", numba_f32="log1p_f32({0})",
       cuda="log1p{s}({0})")
define("expm1", lambda xp, x: xp.expm1(x), lambda m, x, y: y + 1, cost=25.0,
       llvm="call {t} @minflux_expm1_{tag}({t} {0})", numba="_F(math.expm1({0}))",
       numba_f32="expm1_f32({0})", cuda="expm1{s}({0})")
define("sqrt", lambda xp, x: xp.sqrt(x), lambda m, x, y: 0.5 / y, cost=4.5,
       llvm="call {t} @llvm.sqrt.{tag}({t} {0})", numba="np.sqrt({0})",
       cuda="sqrt{s}({0})")
define("sin", lambda xp, x: xp.sin(x), lambda m, x, y: m.cos(x), cost=88.0, finite=True,
       llvm="call {t} @llvm.sin.{tag}({t} {0})", numba="_F(math.sin({0}))", cuda="sin{s}({0})")
define("cos", lambda xp, x: xp.cos(x), lambda m, x, y: -m.sin(x), cost=87.0, finite=True,
       llvm="call {t} @llvm.cos.{tag}({t} {0})", numba="_F(math.cos({0}))", cuda="cos{s}({0})")
define("tanh", lambda xp, x: xp.tanh(x), lambda m, x, y: 1 - y * y, cost=27.0, finite=True,
       llvm="call {t} @minflux_tanh_{tag}({t} {0})", numba="_F(math.tanh({0}))", numba_f32="tanh_f32({0})",
       cuda="tanh{s}({0})")
define("sigmoid", _sigmoid, lambda m, x, y: y * (1 - y), cost=20.0, finite=True,
       llvm="call {t} @minflux_sigmoid_{tag}({t} {0})", numba="_F(_sigmoid64({0}))",
       numba_f32="sigmoid_f32({0})", cuda="minflux_sigmoid_{tag}({0})",
       cuda_fast32="minflux_fast_sigmoid_f32({0})")
define("relu", lambda xp, x: xp.maximum(x, 0), lambda m, x, y: _step(m, x > 0), finite=True,
       llvm="call {t} @minflux_max_{tag}({t} {0}, {t} 0.0)", numba="_max({0}, _F(0.0))",
       cuda="minflux_max_{tag}({0}, ({t})0)")
define("softplus", lambda xp, x: xp.logaddexp(0, x), lambda m, x, y: m.sigmoid(x), cost=40.0,
       llvm="call {t} @minflux_softplus_{tag}({t} {0})", numba="_F(_softplus64({0}))",
       numba_f32="softplus_f32({0})", cuda="minflux_softplus_{tag}({0})")


def _libm(name: str, arity: int = 1) -> dict:
    """The spellings of a function numba and CUDA both take from libm under the same name."""
    args = ", ".join(f"{{{k}}}" for k in range(arity))
    typed = ", ".join(f"{{t}} {{{k}}}" for k in range(arity))
    return dict(numba=f"_F(math.{name}({args}))", llvm=f"call {{t}} @{name}{{s}}({typed})",
                cuda=f"{name}{{s}}({args})")


# the rest of Python's math module that scalar functions may call
define("tan", lambda xp, x: xp.tan(x), lambda m, x, y: 1 + y * y, cost=420.0, **_libm("tan"))
define("asin", lambda xp, x: xp.arcsin(x), lambda m, x, y: 1 / m.sqrt(1 - x * x), cost=95.0, **_libm("asin"))
define("acos", lambda xp, x: xp.arccos(x), lambda m, x, y: -1 / m.sqrt(1 - x * x), cost=160.0,
       **_libm("acos"))
define("atan", lambda xp, x: xp.arctan(x), lambda m, x, y: 1 / (1 + x * x), cost=190.0, finite=True,
       **_libm("atan"))
define("sinh", lambda xp, x: xp.sinh(x), lambda m, x, y: m.cosh(x), cost=460.0, **_libm("sinh"))
define("cosh", lambda xp, x: xp.cosh(x), lambda m, x, y: m.sinh(x), cost=170.0, **_libm("cosh"))
define("asinh", lambda xp, x: xp.arcsinh(x), lambda m, x, y: 1 / m.sqrt(x * x + 1), cost=460.0,
       **_libm("asinh"))
define("acosh", lambda xp, x: xp.arccosh(x), lambda m, x, y: 1 / m.sqrt(x * x - 1), cost=450.0,
       **_libm("acosh"))
define("atanh", lambda xp, x: xp.arctanh(x), lambda m, x, y: 1 / (1 - x * x), cost=300.0, **_libm("atanh"))
define("log2", lambda xp, x: xp.log2(x), lambda m, x, y: 1.4426950408889634 / x, cost=75.0, **_libm("log2"))
define("log10", lambda xp, x: xp.log10(x), lambda m, x, y: 0.4342944819032518 / x, cost=180.0,
       **_libm("log10"))
define("atan2", lambda xp, a, b: xp.arctan2(a, b),
       lambda m, a, b, y: _off_origin(m, a * a + b * b, b),
       lambda m, a, b, y: _off_origin(m, a * a + b * b, -a), cost=330.0, **_libm("atan2", 2))
define("hypot", lambda xp, a, b: xp.hypot(a, b),
       lambda m, a, b, y: _off_origin(m, y, a), lambda m, a, b, y: _off_origin(m, y, b), cost=85.0,
       **_libm("hypot", 2))
_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(xp, x):
    """The error function on arrays: libm's erf per element on the host, CuPy's kernel on a GPU."""
    if xp is np:
        out = _ERF(x)
        dtype = getattr(x, "dtype", np.dtype(np.float64))
        return np.asarray(out, dtype=dtype if np.dtype(dtype).kind == "f" else np.float64)[()]
    import cupyx.scipy.special

    return cupyx.scipy.special.erf(x)


define("erf", _erf, lambda m, x, y: 1.1283791670955126 * m.exp(-(x * x)),   # 2 / sqrt(pi) exp(-x^2)
       cost=110.0, finite=True, **_libm("erf"))
define("ceil", lambda xp, x: xp.ceil(x), lambda m, x, y: 0, finite=True,
       llvm="call {t} @llvm.ceil.{tag}({t} {0})", numba="np.ceil({0})",
       cuda="ceil{s}({0})")
define("trunc", lambda xp, x: xp.trunc(x), lambda m, x, y: 0, finite=True,
       llvm="call {t} @llvm.trunc.{tag}({t} {0})", numba="np.trunc({0})",
       cuda="trunc{s}({0})")
# selection and comparisons (conditions carry no derivative)
define("where", _where, None, lambda m, c, a, b, y: _step(m, c), lambda m, c, a, b, y: 1 - _step(m, c),
       result="where", finite=True, llvm="select i1 {0}, {t} {1}, {t} {2}",
       llvm_int="select i1 {0}, {t} {1}, {t} {2}", numba="_select({0}, {1}, {2})", cuda="({0} ? {1} : {2})",
       cuda_int="({0} ? {1} : {2})")


def _comparison(name: str, impl, operator: str, ordered: str, signed: str) -> None:
    """A comparison; ``ordered``/``signed`` are LLVM's float and integer predicates (nan compares
    false, except ``!=``, as in Python)."""
    spelling = f"({{0}} {operator} {{1}})"
    define(name, impl, None, None, result="bool", finite=True, numba=spelling,
           llvm=f"fcmp {ordered} {{t}} {{0}}, {{1}}", llvm_int=f"icmp {signed} {{t}} {{0}}, {{1}}",
           cuda=spelling, cuda_int=spelling)


_comparison("less", lambda xp, a, b: a < b, "<", "olt", "slt")
_comparison("less_equal", lambda xp, a, b: a <= b, "<=", "ole", "sle")
_comparison("greater", lambda xp, a, b: a > b, ">", "ogt", "sgt")
_comparison("greater_equal", lambda xp, a, b: a >= b, ">=", "oge", "sge")
_comparison("equal", lambda xp, a, b: a == b, "==", "oeq", "eq")
_comparison("not_equal", lambda xp, a, b: a != b, "!=", "une", "ne")
define("logical_not", lambda xp, x: xp.logical_not(x), None, result="bool", finite=True,
       llvm="xor i1 {0}, true", numba="(not {0})", cuda="(!{0})", cuda_int="(!{0})")
define("logical_and", lambda xp, a, b: xp.logical_and(a, b), None, None, result="bool", finite=True,
       llvm="and i1 {0}, {1}", numba="({0} & {1})", cuda="({0} && {1})", cuda_int="({0} && {1})")
define("logical_or", lambda xp, a, b: xp.logical_or(a, b), None, None, result="bool", finite=True,
       llvm="or i1 {0}, {1}", numba="({0} | {1})", cuda="({0} || {1})", cuda_int="({0} || {1})")
