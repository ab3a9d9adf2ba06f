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


def _forward_rows(v, sv, bv, eps, out=None):
    """The row kernels' forward pass: (result, normalised rows, reciprocal deviations), each written
    into its ``out=`` array where one is given."""
    operands = _forward_operands(v, sv, bv, eps)
    x = operands[0]
    results = _outs(out, [(v.shape, x.shape), (x.shape, x.shape), (x.shape[:1], x.shape[:1])], x.dtype)
    layer_norm_rows.forward(*operands, *(inside for _, inside, _ in results))
    return _delivered(results)


def _forward_command(args: tuple, kwargs: dict, errstate: dict):
    outs = kwargs.get("out")
    if not _in_place(args[:3], outs) or not args[0].size:
        return None
    operands = _forward_operands(*args)
    x = operands[0]
    outs = [outs[0].reshape(x.shape), *outs[1:]]
    return layer_norm_rows.command("forward", (*operands, *outs), operands[1:])


def _forward_operands(v, sv, bv, eps) -> tuple:
    """x as (rows, columns), scale, shift (ones, zeros where not given), epsilon in a float64 array."""
    columns = v.shape[-1]
    scale = np.ones(columns, v.dtype) if sv is None else np.ascontiguousarray(sv)
    shift = np.zeros(columns, v.dtype) if bv is None else np.ascontiguousarray(bv)
    return np.ascontiguousarray(v).reshape(-1, columns), scale, shift, np.array([eps], np.float64)


def _backward_rows(g, normalised, reciprocal, sv, out=None):
    """The row kernels' backward pass: the gradients of x, of the scale (None without one) and of the
    shift, each written into its ``out=`` array where one is given."""
    operands = _backward_operands(g, normalised, reciprocal, sv)
    rows = operands[0]
    columns = rows.shape[1:]
    results = _outs(out, [(g.shape, rows.shape), (columns, columns), (columns, columns)], rows.dtype)
    g_x, g_scale, g_shift = (inside for _, inside, _ in results)
    layer_norm_rows.backward(*operands, g_x, np.empty(2 * columns[0]), g_scale, g_shift)
    delivered = _delivered(results)
    return delivered[0], None if sv is None else delivered[1], delivered[2]


def _backward_command(args: tuple, kwargs: dict, errstate: dict):
    g, normalised, reciprocal, sv = args
    outs = kwargs.get("out")
    if outs is None or not _in_place((g, normalised, reciprocal, sv),
                                     [outs[0], outs[2], *([outs[1]] if sv is not None else [])]):
        return None
    operands = _backward_operands(*args)
    rows, columns = operands[0].shape
    if not rows:
        return None
    sums, g_scale = np.empty(2 * columns), outs[1] if sv is not None else np.empty(columns, g.dtype)
    held = (sums, g_scale, operands[3])
    return layer_norm_rows.command("backward", (*operands, outs[0].reshape(rows, columns), sums, g_scale,
                                                outs[2]), held)


def _backward_operands(g, normalised, reciprocal, sv) -> tuple:
    """g as (rows, columns), the forward pass's normalised rows and reciprocals, the scale (ones where
    not given)."""
    columns = normalised.shape[1]
    scale = np.ones(columns, g.dtype) if sv is None else np.ascontiguousarray(sv)
    return np.ascontiguousarray(g).reshape(-1, columns), normalised, reciprocal, scale


def _outs(out, layouts: list, dtype) -> list:
    """Per result (its shape, the shape the kernel writes): (the array to deliver, the C-contiguous
    array the kernel writes, whether that is the first in place: the given ``out=`` array where it is
    so laid out)."""
    given = out if out is not None else [None] * len(layouts)
    made = []
    for o, (shape, inside) in zip(given, layouts):
        target = o if o is not None else np.empty(shape, dtype)
        in_place = target.flags.c_contiguous and target.dtype == dtype
        made.append((target, target.reshape(inside) if in_place else np.empty(inside, dtype), in_place))
    return made


def _delivered(results: list) -> tuple:
    """The arrays to return, copying a result the kernel could not write in place."""
    for target, writes, in_place in results:
        if not in_place:
            np.copyto(target, writes.reshape(target.shape))
    return tuple(target for target, _, _ in results)


def _in_place(arrays, outs) -> bool:
    """Whether the arrays (None aside) and every ``out=`` array are C-contiguous arrays of the first's
    dtype, so that a command reads and writes them in place."""
    dtype = arrays[0].dtype
    return (outs is not None and all(o is not None and o.flags.c_contiguous and o.dtype == dtype for o in outs)
            and all(a is None or a.flags.c_contiguous and a.dtype == dtype for a in arrays))


_forward_rows.native_command, _backward_rows.native_command = _forward_command, _backward_command
_forward_rows, _backward_rows = operation(_forward_rows, results="out"), operation(_backward_rows, results="out")
