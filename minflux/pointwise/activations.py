"""Activation functions as primitives with their own derivative rules (`scalar_rule`).

Each is one row of the derivative table: its value is the scalar body below (compiled into every kernel
that calls it, on every backend), its derivative the rule beside it, so ``mf.gelu(x)`` on arrays and
``mf.gelu(x)`` inside an `mf.elementwise` function are the same primitive, and both fuse with the
elementwise code around them. Functions with a parameter (``elu``'s ``alpha``, ``leaky_relu``'s
``slope``) take it as a second argument, with the usual default on arrays; inside a scalar function
pass it explicitly.

>>> import minflux as mf, numpy as np
>>> x = np.array([-1.0, 0.0, 2.0])
>>> np.round(mf.gelu(x), 4), np.round(mf.silu(x), 4), mf.leaky_relu(x)
(array([-0.1587,  0.    ,  1.9545]), array([-0.2689,  0.    ,  1.7616]), array([-0.01,  0.  ,  2.  ]))
"""
from __future__ import annotations

from .functions import scalar_rule
from .primitives import erf, exp, expm1, log1p, sigmoid, softplus, sqrt

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


@scalar_rule(lambda m, x, y: 0.5 * (1.0 + m.erf(x * _SQRT_HALF)) + x * _INV_SQRT_2PI * m.exp(-0.5 * x * x))
def gelu(x):
    """Gaussian error linear unit ``x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2))`` (the exact form).

    >>> import minflux as mf, numpy as np
    >>> round(float(mf.gelu(np.array(1.0))), 10)
    0.8413447461
    """
    return 0.5 * x * (1.0 + erf(x * _SQRT_HALF))


@scalar_rule(lambda m, x, y: m.sigmoid(x) * (1.0 + x * (1.0 - m.sigmoid(x))))
def silu(x):
    """Sigmoid-weighted linear unit (swish) ``x * sigmoid(x)``.

    >>> import minflux as mf, numpy as np
    >>> float(mf.silu(np.array(0.0)))
    0.0
    """
    return x * sigmoid(x)


@scalar_rule(lambda m, x, alpha, y: m.where(x > 0, 1.0, y + alpha))
def _elu(x, alpha):
    if x > 0:
        return x
    return alpha * expm1(x)


def elu(x, alpha=1.0):
    """Exponential linear unit: ``x`` for ``x > 0``, else ``alpha * (exp(x) - 1)``; the derivative at
    0 is ``alpha`` (the left one, as relu's is 0). ``alpha`` gets no gradient.

    >>> import minflux as mf, numpy as np
    >>> np.round(mf.elu(np.array([-1.0, 2.0])), 4)
    array([-0.6321,  2.    ])
    """
    return _elu(x, alpha)


@scalar_rule(lambda m, x, slope, y: m.where(x > 0, 1.0, slope))
def _leaky_relu(x, slope):
    if x > 0:
        return x
    return slope * x


def leaky_relu(x, slope=0.01):
    """``x`` for ``x > 0``, else ``slope * x``; the derivative at 0 is ``slope``. ``slope`` gets no gradient.

    >>> import minflux as mf, numpy as np
    >>> mf.leaky_relu(np.array([-2.0, 3.0]), 0.1)
    array([-0.2,  3. ])
    """
    return _leaky_relu(x, slope)


@scalar_rule(lambda m, x, y: 1.0 - m.sigmoid(x))
def log_sigmoid(x):
    """``log(sigmoid(x)) = -softplus(-x)``, finite for every finite ``x``.

    >>> import minflux as mf, numpy as np
    >>> float(mf.log_sigmoid(np.array(-1000.0)))
    -1000.0
    """
    return -softplus(-x)


@scalar_rule(lambda m, a, b, y: m.sigmoid(a - b), lambda m, a, b, y: m.sigmoid(b - a))
def logaddexp(a, b):
    """``log(exp(a) + exp(b))`` without overflow.

    >>> import minflux as mf, numpy as np
    >>> float(mf.logaddexp(np.array(1000.0), 1000.0))       # exp(1000) overflows; this does not
    1000.6931471805599
    """
    if a > b:
        return a + log1p(exp(b - a))
    return b + log1p(exp(a - b))


@scalar_rule(lambda m, x, y: 2.0 * x)
def square(x):
    """``x * x``.

    >>> import minflux as mf, numpy as np
    >>> mf.square(np.array([-3.0, 0.5]))
    array([9.  , 0.25])
    """
    return x * x


@scalar_rule(lambda m, x, y: -0.5 * y / x)
def rsqrt(x):
    """``1 / sqrt(x)``.

    >>> import minflux as mf, numpy as np
    >>> mf.rsqrt(np.array([4.0, 0.25]))
    array([0.5, 2. ])
    """
    return 1.0 / sqrt(x)


elu.__scalar_rule__ = _elu.__scalar_rule__                 # callable inside scalar functions too
leaky_relu.__scalar_rule__ = _leaky_relu.__scalar_rule__
