"""Layer normalisation as one op with a hand-written VJP.

Composed from means and elementwise ops, a layer norm records five nodes and its backward pass makes
a dozen passes over the activations; as one op it stores only the normalised values and the
reciprocal deviations (on the CPU its passes are compiled row kernels, `layer_norm_rows`, unless
``MINFLUX_ELEMENTWISE=numpy`` selects the array formula), and its backward pass is the closed form
``dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat))`` with ``dxhat = g scale``. An empty last axis
has nothing to normalise: the result and the input's gradient are empty, the parameters' zero.
"""
from __future__ import annotations

import numpy as np

from ..autograd import record
from ..backend import get_array_module, is_numpy_array
from ..schedule import operation
from ..broadcasting import sum_to
from . import layer_norm_rows
from ._common import value_of


def layer_norm(x, scale=None, shift=None, eps: float = 1e-5):
    """``(x - mean) / sqrt(var + eps) * scale + shift`` over the last axis (biased variance).

    ``scale`` and ``shift`` broadcast against the last axis; None leaves them out.

    >>> import minflux as mf, numpy as np
    >>> np.round(mf.layer_norm(np.array([[1.0, 2.0, 3.0, 4.0]])), 3)
    array([[-1.342, -0.447,  0.447,  1.342]])
    >>> g, = mf.gradient(lambda x: mf.sum(mf.layer_norm(x) * np.array([1.0, 0, 0, 0])), np.arange(4.0))
    >>> bool(abs(g.sum()) < 1e-12)             # shifting x does not change the output
    True
    >>> mf.layer_norm(np.ones((2, 0))).shape
    (2, 0)
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.layer_norm")
    if v.ndim == 0:
        raise ValueError("mf.layer_norm: needs an array with at least one axis to normalise over")
    sv = None if scale is None else value_of(scale)
    bv = None if shift is None else value_of(shift)
    compiled, dtype = _compiled_rows(v, sv, bv), v.dtype  # the closure must not hold the input
    if compiled:
        out, normalised, reciprocal = _forward_rows(v, sv, bv, eps)
    else:
        centred = v - _row_mean(v)
        reciprocal = 1.0 / xp.sqrt(_row_mean(centred * centred) + eps)
        normalised = centred * reciprocal
        out = normalised if sv is None else normalised * sv
        if bv is not None:
            out = out + bv

    def vjp(g, needs):
        if compiled and is_numpy_array(g) and g.dtype == dtype:
            g_x, g_scale, g_shift = _backward_rows(g, normalised, reciprocal, sv)
        else:
            g_normalised = g if sv is None else g * sv
            mean_g = _row_mean(g_normalised)
            mean_gn = _row_mean(g_normalised * normalised)
            g_x = reciprocal * (g_normalised - mean_g - normalised * mean_gn)
            g_scale = None if sv is None else sum_to(g * normalised, sv.shape)
            g_shift = None if bv is None else sum_to(g, bv.shape)
        return [g_x if needs[0] else None, g_scale if needs[1] else None,
                g_shift if needs[2] and bv is not None else None]

    return record("layer_norm", out, [x, scale, shift], vjp)


def _row_mean(a):
    """The mean over the last axis, kept; 0 for an empty axis (numpy's mean would warn and give NaN)."""
    return a.sum(axis=-1, keepdims=True) / max(a.shape[-1], 1)


def _compiled_rows(v, sv, bv) -> bool:
    """True when the row kernels apply: numpy arrays of one float dtype, parameters of shape ``(C,)``."""
    params = [p for p in (sv, bv) if p is not None]
    return layer_norm_rows.usable(v, *params) and all(p.shape == v.shape[-1:] for p in params)


@operation(results="new")
def _forward_rows(v, sv, bv, eps):
    columns = v.shape[-1]
    x = np.ascontiguousarray(v).reshape(-1, columns)
    scale = np.ones(columns, v.dtype) if sv is None else np.ascontiguousarray(sv)
    shift = np.zeros(columns, v.dtype) if bv is None else np.ascontiguousarray(bv)
    out, normalised = np.empty_like(x), np.empty_like(x)
    reciprocal = np.empty(x.shape[0], v.dtype)
    layer_norm_rows.forward(x, scale, shift, float(eps), out, normalised, reciprocal)
    return out.reshape(v.shape), normalised, reciprocal


@operation(results="new")
def _backward_rows(g, normalised, reciprocal, sv):
    shape, columns = g.shape, normalised.shape[1]
    g = np.ascontiguousarray(g).reshape(-1, columns)
    scale = np.ones(columns, g.dtype) if sv is None else np.ascontiguousarray(sv)
    g_x = np.empty_like(g)
    g_scale, g_shift = np.zeros(columns), np.zeros(columns)
    layer_norm_rows.backward(g, normalised, reciprocal, scale, g_x, g_scale, g_shift)
    g_scale = None if sv is None else g_scale.astype(sv.dtype)
    return g_x.reshape(shape), g_scale, g_shift.astype(g.dtype)
