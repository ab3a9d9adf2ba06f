"""Elementwise ops: each is a broadcast of one primitive of the derivative table through the
broadcast node, numpy-named and accepting arrays, Tensors and Python numbers.

Outside a gradient computation they run the primitive on the arrays and return an array. Each op
carries its table name as ``__primitive__``, so scalar functions that call ``mf.tanh`` compile it
as that primitive.
"""
from __future__ import annotations

from ..autograd import active_tape
from ..compiler import TABLE, define
from .eager import apply_primitive_now
from .lazy import defer


def apply_primitive(name: str, *args):
    """Broadcast primitive ``name`` of the derivative table over ``args``.

    Inside a gradient computation, with an argument tracked on the tape, the result is a deferred
    Tensor that fuses with the elementwise ops around it (`minflux.pointwise.lazy`); otherwise the
    primitive runs now (`apply_primitive_now`).

    >>> import numpy as np
    >>> apply_primitive("maximum", np.array([1.0, 3.0]), 2.0)
    array([2., 3.])
    """
    tape = active_tape()
    if tape is not None:
        deferred = defer(name, args, tape)
        if deferred is not None:
            return deferred
    return apply_primitive_now(name, *args, tape=tape)


def primitive_op(name: str, doc: str | None = None):
    """The public elementwise op of table primitive ``name`` (positional arguments, the row's arity).

    A primitive added to the table with `minflux.compiler.define` becomes an op like
    ``mf.tanh``: it runs on arrays, records on the tape, fuses, and compiles inside scalar functions.

    >>> import numpy as np
    >>> primitive_op("hypot")(np.array([3.0]), 4.0)
    array([5.])
    """
    arity = TABLE[name].arity

    def op(*args):
        if len(args) != arity:
            raise TypeError(f"{name}() takes {arity} argument(s), got {len(args)}")
        return apply_primitive(name, *args)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc if doc is not None else TABLE[name].doc or f"Elementwise ``{name}``."
    op.__primitive__ = name
    return op


def define_primitive(name: str, impl, *partials, doc: str = "", **row):
    """Add a primitive to the derivative table (one row: value, derivatives, result kind, cost,
    finiteness and backend spellings, see `minflux.compiler.Primitive`) and return its op.

    >>> import minflux as mf, numpy as np
    >>> cube = mf.define_primitive("cube_example", lambda xp, x: x * x * x, lambda m, x, y: 3 * x * x,
    ...                            finite=True, numba="({0} * {0} * {0})", cuda="({0} * {0} * {0})")
    >>> mf.gradient(lambda x: mf.sum(cube(x)), np.array([2.0]))[0]
    array([12.])
    >>> mf.broadcast(lambda x: cube(x) + 1.0, np.array([2.0]))
    array([9.])
    >>> from minflux.compiler import TABLE; del TABLE["cube_example"]   # leave the table as it was
    """
    define(name, impl, *partials, doc=doc, **row)
    return primitive_op(name, doc or None)


def _example(call, result):
    return f"\n\n    >>> import minflux as mf, numpy as np\n    >>> {call}\n    {result}\n    "


add = primitive_op("add", "Elementwise ``a + b``." + _example("mf.add(np.ones(2), 1.0)", "array([2., 2.])"))
subtract = primitive_op("subtract", "Elementwise ``a - b``." + _example("mf.subtract(np.ones(2), 1.0)", "array([0., 0.])"))
multiply = primitive_op("multiply", "Elementwise ``a * b``." + _example("mf.multiply(np.ones(2), 3.0)", "array([3., 3.])"))
divide = primitive_op("divide", "Elementwise ``a / b``." + _example("mf.divide(np.ones(2), 4.0)", "array([0.25, 0.25])"))
floor_divide = primitive_op("floor_divide", "Elementwise ``a // b`` (zero derivative)." + _example("mf.floor_divide(np.array([7.0]), 2.0)", "array([3.])"))
mod = primitive_op("mod", "Elementwise ``a % b`` (Python's sign convention)." + _example("mf.mod(np.array([7.0]), 2.0)", "array([1.])"))
power = primitive_op("power", "Elementwise ``a ** b``." + _example("mf.power(np.array([3.0]), 2.0)", "array([9.])"))
maximum = primitive_op("maximum", "Elementwise maximum; ties send the gradient to ``a``." + _example("mf.maximum(np.array([1.0, 3.0]), 2.0)", "array([2., 3.])"))
minimum = primitive_op("minimum", "Elementwise minimum; ties send the gradient to ``a``." + _example("mf.minimum(np.array([1.0, 3.0]), 2.0)", "array([1., 2.])"))
less = primitive_op("less", "Elementwise ``a < b`` (boolean, no gradient)." + _example("mf.less(np.array([1.0, 3.0]), 2.0)", "array([ True, False])"))
less_equal = primitive_op("less_equal", "Elementwise ``a <= b``." + _example("mf.less_equal(np.array([2.0]), 2.0)", "array([ True])"))
greater = primitive_op("greater", "Elementwise ``a > b``." + _example("mf.greater(np.array([1.0, 3.0]), 2.0)", "array([False,  True])"))
greater_equal = primitive_op("greater_equal", "Elementwise ``a >= b``." + _example("mf.greater_equal(np.array([2.0]), 2.0)", "array([ True])"))
equal = primitive_op("equal", "Elementwise ``a == b``." + _example("mf.equal(np.array([2.0]), 2.0)", "array([ True])"))
not_equal = primitive_op("not_equal", "Elementwise ``a != b``." + _example("mf.not_equal(np.array([2.0]), 2.0)", "array([False])"))
logical_and = primitive_op("logical_and", "Elementwise ``a and b``." + _example("mf.logical_and(np.array([True]), False)", "array([False])"))
logical_or = primitive_op("logical_or", "Elementwise ``a or b``." + _example("mf.logical_or(np.array([True]), False)", "array([ True])"))
negative = primitive_op("negative", "Elementwise ``-x``." + _example("mf.negative(np.ones(1))", "array([-1.])"))
abs = primitive_op("abs", "Elementwise ``|x|``; the derivative at 0 is 0." + _example("mf.abs(np.array([-2.0]))", "array([2.])"))
sign = primitive_op("sign", "Elementwise sign (zero derivative)." + _example("mf.sign(np.array([-2.0, 0.0]))", "array([-1.,  0.])"))
floor = primitive_op("floor", "Elementwise floor (zero derivative)." + _example("mf.floor(np.array([1.5]))", "array([1.])"))
exp = primitive_op("exp", "Elementwise ``e**x``." + _example("mf.exp(np.zeros(1))", "array([1.])"))
log = primitive_op("log", "Elementwise natural logarithm." + _example("mf.log(np.ones(1))", "array([0.])"))
log1p = primitive_op("log1p", "Elementwise ``log(1 + x)``, accurate near 0." + _example("mf.log1p(np.zeros(1))", "array([0.])"))
expm1 = primitive_op("expm1", "Elementwise ``exp(x) - 1``, accurate near 0." + _example("mf.expm1(np.zeros(1))", "array([0.])"))
sqrt = primitive_op("sqrt", "Elementwise square root." + _example("mf.sqrt(np.array([4.0]))", "array([2.])"))
sin = primitive_op("sin", "Elementwise sine." + _example("mf.sin(np.zeros(1))", "array([0.])"))
cos = primitive_op("cos", "Elementwise cosine." + _example("mf.cos(np.zeros(1))", "array([1.])"))
tanh = primitive_op("tanh", "Elementwise hyperbolic tangent." + _example("mf.tanh(np.zeros(1))", "array([0.])"))
sigmoid = primitive_op("sigmoid", "Elementwise logistic ``1 / (1 + exp(-x))``." + _example("mf.sigmoid(np.zeros(1))", "array([0.5])"))
relu = primitive_op("relu", "Elementwise ``max(x, 0)``; the derivative at 0 is 0." + _example("mf.relu(np.array([-1.0, 2.0]))", "array([0., 2.])"))
softplus = primitive_op("softplus", "Elementwise ``log(1 + exp(x))``, stable for large ``|x|``." + _example("mf.softplus(np.zeros(1))", "array([0.69314718])"))
logical_not = primitive_op("logical_not", "Elementwise ``not x``." + _example("mf.logical_not(np.array([True]))", "array([False])"))


tan = primitive_op("tan", "Elementwise tangent." + _example("mf.tan(np.zeros(1))", "array([0.])"))
asin = primitive_op("asin", "Elementwise inverse sine." + _example("mf.asin(np.ones(1))", "array([1.57079633])"))
acos = primitive_op("acos", "Elementwise inverse cosine." + _example("mf.acos(np.ones(1))", "array([0.])"))
atan = primitive_op("atan", "Elementwise inverse tangent." + _example("mf.atan(np.ones(1))", "array([0.78539816])"))
sinh = primitive_op("sinh", "Elementwise hyperbolic sine." + _example("mf.sinh(np.zeros(1))", "array([0.])"))
cosh = primitive_op("cosh", "Elementwise hyperbolic cosine." + _example("mf.cosh(np.zeros(1))", "array([1.])"))
asinh = primitive_op("asinh", "Elementwise inverse hyperbolic sine." + _example("mf.asinh(np.zeros(1))", "array([0.])"))
acosh = primitive_op("acosh", "Elementwise inverse hyperbolic cosine." + _example("mf.acosh(np.ones(1))", "array([0.])"))
atanh = primitive_op("atanh", "Elementwise inverse hyperbolic tangent." + _example("mf.atanh(np.zeros(1))", "array([0.])"))
log2 = primitive_op("log2", "Elementwise base-2 logarithm." + _example("mf.log2(np.array([8.0]))", "array([3.])"))
log10 = primitive_op("log10", "Elementwise base-10 logarithm." + _example("mf.log10(np.array([100.0]))", "array([2.])"))
atan2 = primitive_op("atan2", "Elementwise ``atan(a / b)`` in the quadrant of ``(b, a)``." + _example("mf.atan2(np.ones(1), -1.0)", "array([2.35619449])"))
hypot = primitive_op("hypot", "Elementwise ``sqrt(a**2 + b**2)``." + _example("mf.hypot(np.array([3.0]), 4.0)", "array([5.])"))
erf = primitive_op("erf", "Elementwise error function ``2 / sqrt(pi) * integral_0^x exp(-t^2) dt``." + _example("mf.erf(np.zeros(1))", "array([0.])"))
ceil = primitive_op("ceil", "Elementwise ceiling (zero derivative)." + _example("mf.ceil(np.array([1.5]))", "array([2.])"))
trunc = primitive_op("trunc", "Elementwise rounding toward zero (zero derivative)." + _example("mf.trunc(np.array([-1.5]))", "array([-1.])"))


def where(condition, a, b):
    """``a`` where ``condition`` holds, else ``b`` (the condition gets no gradient).

    >>> import minflux as mf, numpy as np
    >>> mf.where(np.array([True, False]), 1.0, np.array([5.0, 6.0]))
    array([1., 6.])
    """
    return apply_primitive("where", condition, a, b)


where.__primitive__ = "where"


def clip(x, lo, hi):
    """Elementwise ``min(max(x, lo), hi)``; ``x`` gets the gradient on the closed interval.

    >>> import minflux as mf, numpy as np
    >>> mf.clip(np.array([-2.0, 0.5, 2.0]), 0.0, 1.0)
    array([0. , 0.5, 1. ])
    """
    return apply_primitive("clip", x, lo, hi)


clip.__primitive__ = "clip"
