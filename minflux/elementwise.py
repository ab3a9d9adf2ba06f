"""Elementwise ops: each is a broadcast of one primitive of the derivative table through the
broadcast node, numpy-named and accepting arrays, Tensors and Python numbers.

Outside a gradient computation they run the primitive on the arrays and return an array.
"""
from __future__ import annotations

import numpy as np

from .autograd import active_tape
from .backend import get_array_module
from .broadcast.node import broadcast_node
from .broadcast.rules import TABLE, ArrayMath
from .tensor import Tensor


_MATH: dict = {}


def _math(xp) -> ArrayMath:
    m = _MATH.get(xp)
    if m is None:
        m = _MATH[xp] = ArrayMath(xp)
    return m


def apply_primitive(name: str, *args):
    """Broadcast primitive ``name`` of the derivative table over ``args``.

    The forward pass is the primitive's array implementation; when an argument is tracked, the
    table's partials for it are evaluated on the same arrays and recorded with the outputs as one
    broadcast node.

    >>> import numpy as np
    >>> apply_primitive("maximum", np.array([1.0, 3.0]), 2.0)
    array([2., 3.])
    """
    prim = TABLE[name]
    if len(args) != prim.arity:
        raise TypeError(f"mf.{name} takes {prim.arity} arguments, got {len(args)}")
    values = [a.value if isinstance(a, Tensor) else a for a in args]
    xp = get_array_module(*values, op=f"mf.{name}")
    try:
        y = prim.impl(xp, *values)
    except ValueError as e:  # numpy's broadcast error lacks the op's name
        shapes = [tuple(np.shape(v)) for v in values]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise ValueError(f"mf.{name}: cannot broadcast shapes {' and '.join(map(str, shapes))}") from e
        raise
    tape = active_tape()
    wanted = () if tape is None else [
        k for k, a in enumerate(args)
        if isinstance(a, Tensor) and a._tape is tape and prim.partials[k] is not None]
    if not wanted:
        for a in args:
            if isinstance(a, Tensor):
                return Tensor(y)
        return y
    rules, m = prim.partials, _math(xp)
    partials = {(0, k): _as_dtype(rules[k](m, *values, y), y) for k in wanted}
    return broadcast_node(name, args, (y,), partials)


def _as_dtype(partial, y):
    """Indicator partials (``where(c, 1.0, 0.0)``) come out float64; keep float32 gradients float32."""
    dtype = getattr(partial, "dtype", None)
    if dtype is not None and dtype != y.dtype and y.dtype.kind == "f":
        return partial.astype(y.dtype)
    return partial


def _unary(name, doc):
    def op(x):
        return apply_primitive(name, x)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


def _binary(name, doc):
    def op(a, b):
        return apply_primitive(name, a, b)
    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    return op


def _example(call, result):
    return f"\n\n    >>> import minflux as mf, numpy as np\n    >>> {call}\n    {result}\n    "


add = _binary("add", "Elementwise ``a + b``." + _example("mf.add(np.ones(2), 1.0)", "array([2., 2.])"))
subtract = _binary("subtract", "Elementwise ``a - b``." + _example("mf.subtract(np.ones(2), 1.0)", "array([0., 0.])"))
multiply = _binary("multiply", "Elementwise ``a * b``." + _example("mf.multiply(np.ones(2), 3.0)", "array([3., 3.])"))
divide = _binary("divide", "Elementwise ``a / b``." + _example("mf.divide(np.ones(2), 4.0)", "array([0.25, 0.25])"))
floor_divide = _binary("floor_divide", "Elementwise ``a // b`` (zero derivative)." + _example("mf.floor_divide(np.array([7.0]), 2.0)", "array([3.])"))
mod = _binary("mod", "Elementwise ``a % b`` (Python's sign convention)." + _example("mf.mod(np.array([7.0]), 2.0)", "array([1.])"))
power = _binary("power", "Elementwise ``a ** b``." + _example("mf.power(np.array([3.0]), 2.0)", "array([9.])"))
maximum = _binary("maximum", "Elementwise maximum; ties send the gradient to ``a``." + _example("mf.maximum(np.array([1.0, 3.0]), 2.0)", "array([2., 3.])"))
minimum = _binary("minimum", "Elementwise minimum; ties send the gradient to ``a``." + _example("mf.minimum(np.array([1.0, 3.0]), 2.0)", "array([1., 2.])"))
less = _binary("less", "Elementwise ``a < b`` (boolean, no gradient)." + _example("mf.less(np.array([1.0, 3.0]), 2.0)", "array([ True, False])"))
less_equal = _binary("less_equal", "Elementwise ``a <= b``." + _example("mf.less_equal(np.array([2.0]), 2.0)", "array([ True])"))
greater = _binary("greater", "Elementwise ``a > b``." + _example("mf.greater(np.array([1.0, 3.0]), 2.0)", "array([False,  True])"))
greater_equal = _binary("greater_equal", "Elementwise ``a >= b``." + _example("mf.greater_equal(np.array([2.0]), 2.0)", "array([ True])"))
equal = _binary("equal", "Elementwise ``a == b``." + _example("mf.equal(np.array([2.0]), 2.0)", "array([ True])"))
not_equal = _binary("not_equal", "Elementwise ``a != b``." + _example("mf.not_equal(np.array([2.0]), 2.0)", "array([False])"))
logical_and = _binary("logical_and", "Elementwise ``a and b``." + _example("mf.logical_and(np.array([True]), False)", "array([False])"))
logical_or = _binary("logical_or", "Elementwise ``a or b``." + _example("mf.logical_or(np.array([True]), False)", "array([ True])"))
negative = _unary("negative", "Elementwise ``-x``." + _example("mf.negative(np.ones(1))", "array([-1.])"))
abs = _unary("abs", "Elementwise ``|x|``; the derivative at 0 is 0." + _example("mf.abs(np.array([-2.0]))", "array([2.])"))
sign = _unary("sign", "Elementwise sign (zero derivative)." + _example("mf.sign(np.array([-2.0, 0.0]))", "array([-1.,  0.])"))
floor = _unary("floor", "Elementwise floor (zero derivative)." + _example("mf.floor(np.array([1.5]))", "array([1.])"))
exp = _unary("exp", "Elementwise ``e**x``." + _example("mf.exp(np.zeros(1))", "array([1.])"))
log = _unary("log", "Elementwise natural logarithm." + _example("mf.log(np.ones(1))", "array([0.])"))
log1p = _unary("log1p", "Elementwise ``log(1 + x)``, accurate near 0." + _example("mf.log1p(np.zeros(1))", "array([0.])"))
expm1 = _unary("expm1", "Elementwise ``exp(x) - 1``, accurate near 0." + _example("mf.expm1(np.zeros(1))", "array([0.])"))
sqrt = _unary("sqrt", "Elementwise square root." + _example("mf.sqrt(np.array([4.0]))", "array([2.])"))
sin = _unary("sin", "Elementwise sine." + _example("mf.sin(np.zeros(1))", "array([0.])"))
cos = _unary("cos", "Elementwise cosine." + _example("mf.cos(np.zeros(1))", "array([1.])"))
tanh = _unary("tanh", "Elementwise hyperbolic tangent." + _example("mf.tanh(np.zeros(1))", "array([0.])"))
sigmoid = _unary("sigmoid", "Elementwise logistic ``1 / (1 + exp(-x))``." + _example("mf.sigmoid(np.zeros(1))", "array([0.5])"))
relu = _unary("relu", "Elementwise ``max(x, 0)``; the derivative at 0 is 0." + _example("mf.relu(np.array([-1.0, 2.0]))", "array([0., 2.])"))
softplus = _unary("softplus", "Elementwise ``log(1 + exp(x))``, stable for large ``|x|``." + _example("mf.softplus(np.zeros(1))", "array([0.69314718])"))
logical_not = _unary("logical_not", "Elementwise ``not x``." + _example("mf.logical_not(np.array([True]))", "array([False])"))


def where(condition, a, b):
    """``a`` where ``condition`` holds, else ``b`` (the condition gets no gradient).

    >>> import minflux as mf, numpy as np
    >>> mf.where(np.array([True, False]), 1.0, np.array([5.0, 6.0]))
    array([1., 6.])
    """
    return apply_primitive("where", condition, a, b)


def clip(x, lo, hi):
    """Elementwise ``min(max(x, lo), hi)``; ``x`` gets the gradient on the closed interval.

    >>> import minflux as mf, numpy as np
    >>> mf.clip(np.array([-2.0, 0.5, 2.0]), 0.0, 1.0)
    array([0. , 0.5, 1. ])
    """
    return apply_primitive("clip", x, lo, hi)
