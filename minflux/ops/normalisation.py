"""Layer normalisation as one op with a hand-written VJP.

Composed from means and elementwise ops, a layer norm records five nodes and its backward pass makes
a dozen passes over the activations; as one op it stores only the normalised values and the
reciprocal deviations, and its backward pass is the closed form
``dx = r (dxhat - mean(dxhat) - xhat mean(dxhat xhat))`` with ``dxhat = g scale``.
"""
from __future__ import annotations

from ..autograd import record
from ..backend import get_array_module
from ..broadcasting import sum_to
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
    """
    v = value_of(x)
    xp = get_array_module(v, op="mf.layer_norm")
    if v.ndim == 0:
        raise ValueError("mf.layer_norm: needs an array with at least one axis to normalise over")
    sv = None if scale is None else value_of(scale)
    bv = None if shift is None else value_of(shift)
    centred = v - v.mean(axis=-1, keepdims=True)
    reciprocal = 1.0 / xp.sqrt((centred * centred).mean(axis=-1, keepdims=True) + eps)
    normalised = centred * reciprocal
    out = normalised if sv is None else normalised * sv
    if bv is not None:
        out = out + bv

    def vjp(g, needs):
        g_normalised = g if sv is None else g * sv
        g_x = None
        if needs[0]:
            mean_g = g_normalised.mean(axis=-1, keepdims=True)
            mean_gn = (g_normalised * normalised).mean(axis=-1, keepdims=True)
            g_x = reciprocal * (g_normalised - mean_g - normalised * mean_gn)
        g_scale = sum_to(g * normalised, sv.shape) if sv is not None and needs[1] else None
        g_shift = sum_to(g, bv.shape) if bv is not None and needs[2] else None
        return [g_x, g_scale, g_shift]

    return record("layer_norm", out, [x, scale, shift], vjp)
