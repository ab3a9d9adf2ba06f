"""Ops with discrete results: tests (isnan, isfinite, any, all) and ``round``.

The tests give boolean constants. Rounding to ``decimals`` places is piecewise constant, so its
gradient is zero, as for the ``floor``, ``ceil`` and ``trunc`` primitives.
"""
from __future__ import annotations

from ..autograd import record
from ..backend import as_array, get_array_module
from ._common import constant_result, normalise_axes, value_of


def _values(x, op):
    v = value_of(x)
    xp = get_array_module(v, op=op)
    return as_array(xp, v), xp


def isnan(x):
    """Elementwise ``x != x``: True where ``x`` is NaN (no gradient).

    >>> import minflux as mf, numpy as np
    >>> mf.isnan(np.array([1.0, np.nan]))
    array([False,  True])
    """
    v, xp = _values(x, "mf.isnan")
    return constant_result(xp.isnan(v), [x])


def isfinite(x):
    """Elementwise: True where ``x`` is neither infinite nor NaN (no gradient).

    >>> import minflux as mf, numpy as np
    >>> mf.isfinite(np.array([1.0, np.inf, np.nan]))
    array([ True, False, False])
    """
    v, xp = _values(x, "mf.isfinite")
    return constant_result(xp.isfinite(v), [x])


def any(x, axis=None, keepdims: bool = False):
    """Whether any element along ``axis`` is true (nonzero).

    >>> import minflux as mf, numpy as np
    >>> mf.any(np.array([[0.0, 1.0], [0.0, 0.0]]), axis=1)
    array([ True, False])
    """
    v, xp = _values(x, "mf.any")
    axes = normalise_axes(axis, v.ndim, "mf.any", tuple(v.shape))
    return constant_result(xp.any(v, axis=axes, keepdims=keepdims), [x])


def all(x, axis=None, keepdims: bool = False):
    """Whether every element along ``axis`` is true (nonzero).

    >>> import minflux as mf, numpy as np
    >>> bool(mf.all(np.array([1.0, 2.0])))
    True
    """
    v, xp = _values(x, "mf.all")
    axes = normalise_axes(axis, v.ndim, "mf.all", tuple(v.shape))
    return constant_result(xp.all(v, axis=axes, keepdims=keepdims), [x])


def _piecewise_constant(name, x, out, xp):
    return record(name, out, [x], lambda g, needs: [xp.zeros_like(g)])


def round(x, decimals: int = 0):
    """Round to ``decimals`` places, halves to even (as ``numpy.round``); the gradient is zero.

    >>> import minflux as mf, numpy as np
    >>> mf.round(np.array([1.234, 5.678]), 1)
    array([1.2, 5.7])
    >>> mf.round(np.array([0.5, 1.5, -2.5]))
    array([ 0.,  2., -2.])
    """
    v, xp = _values(x, "mf.round")
    return _piecewise_constant("round", x, xp.round(v, decimals), xp)
