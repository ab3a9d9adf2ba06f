"""A matrix product whose masked rows are zero in their leading columns, and skip that work.

A recurrent cell whose rows sometimes ignore part of a product (the HM-LSTM's COPY rows never read
their gates) can leave those rows out of it. Whether leaving them out pays depends on how many rows
the mask drops at this step, a fact of the data; the decision is made inside one `operation`, so the
same code runs eagerly and in a replay of `minflux.compile`, and Python never reads the mask.
"""
from __future__ import annotations

import math

import numpy as np

from ..autograd import record
from ..backend import get_array_module, is_numpy_array
from ..matrix_product import matmul as product, native_command
from ..product_gradient import ProductGradient
from ..runtime import native_runner
from ..schedule import operation
from ._common import value_of
from ._shared_transpose import shared_transpose

SKIP_MIN_FRACTION = 0.2
"""The fraction of rows the mask must drop before their columns are left out of the product."""
SKIP_MIN_WORK = 2**22
"""The multiply-adds leaving the rows out must save (below it, gathering them costs more)."""


def row_masked_matmul(x, w, keep, columns: int):
    """``x @ w`` with the first ``columns`` columns zero in every row where ``keep`` is False.

    ``x`` is ``(B, K)``, ``w`` is ``(K, N)`` and ``keep`` a boolean array of ``B`` elements. When the
    dropped rows are many enough (`SKIP_MIN_FRACTION`, `SKIP_MIN_WORK`) their ``columns`` columns are
    not computed at all; either way the value and the gradient are those of the masked product.

    >>> import minflux as mf, numpy as np
    >>> x, w = np.ones((3, 2)), np.ones((2, 3))
    >>> mf.row_masked_matmul(x, w, np.array([True, False, True]), 2)
    array([[2., 2., 2.],
           [0., 0., 2.],
           [2., 2., 2.]])
    """
    xv, wv, kv = value_of(x), value_of(w), value_of(keep)
    get_array_module(xv, wv, kv, op="mf.row_masked_matmul")
    if xv.ndim != 2 or wv.ndim != 2 or xv.shape[1] != wv.shape[0]:
        raise ValueError(f"mf.row_masked_matmul: needs x (B, K) and w (K, N), got {xv.shape} and {wv.shape}")
    if kv.dtype.kind != "b" or kv.size != xv.shape[0]:
        raise ValueError(f"mf.row_masked_matmul: keep must be a boolean array of {xv.shape[0]} elements, got "
                         f"{kv.dtype} of shape {kv.shape}")
    if not 0 <= columns <= wv.shape[1]:
        raise ValueError(f"mf.row_masked_matmul: columns must lie in [0, {wv.shape[1]}], got {columns}")
    rows = kv.reshape(-1)
    out = _forward(xv, wv, rows, columns)
    w_transposed = shared_transpose(w, wv)

    def vjp(g, needs):
        g = _masked(g, rows, columns)
        return [product(g, w_transposed.get()) if needs[0] else None,
                ProductGradient(xv, g) if needs[1] else None]

    return record("row_masked_matmul", out, [x, w], vjp)


@operation(results="out")
def _forward(x, w, keep, columns: int, out=None):
    dropped = x.shape[0] - int(np.count_nonzero(keep)) if is_numpy_array(keep) else 0
    if dropped < SKIP_MIN_FRACTION * x.shape[0] or dropped * x.shape[1] * columns < SKIP_MIN_WORK:
        out = product(x, w, out)
        out[~keep, :columns] = 0
        return out
    active = np.flatnonzero(keep)
    if out is None:
        out = np.empty((x.shape[0], w.shape[1]), np.result_type(x, w))
    out[:, :columns] = 0
    out[active, :columns] = product(x[active], w[:, :columns])
    out[:, columns:] = product(x, w[:, columns:])
    return out


@operation(results="out")
def _masked(a, keep, columns: int, out=None):
    """``a`` with the first ``columns`` columns zeroed in the rows ``keep`` drops (a new array, or
    ``out``)."""
    if out is None:
        out = a.copy()
    else:
        out[...] = a
    out[~keep, :columns] = 0
    return out


def _forward_command(args: tuple, kwargs: dict, errstate: dict):
    """`_forward` as one native command (`minflux.schedule.native`): the walk stops where the mask drops
    enough rows to leave them out (the Python call does that), else the product and the masked rows'
    zeros; the product's floating-point check stops it too."""
    (x, w, keep, columns), out = args, kwargs.get("out")
    if not (_rows_of(out, x.shape[0]) and _flat_mask(keep, x.shape[0]) and x.ndim == w.ndim == 2
            and x.dtype == w.dtype == out.dtype and out.shape == (x.shape[0], w.shape[1])):
        return None
    gemm = native_command(x, w, out, errstate)
    if gemm is None or gemm.shares != 1:   # a split product stays the Python call
        return None
    work = x.shape[1] * columns
    least = max(math.ceil(SKIP_MIN_FRACTION * x.shape[0]), -(-SKIP_MIN_WORK // work) if work else x.shape[0] + 1)
    check = native_runner.rows_check_words(keep.ctypes.data, x.shape[0], least)
    both = native_runner.sequence(check, gemm, _zeros(keep, out, columns))
    return both._replace(redo=(_forward.__wrapped_operation__, (x, w, keep, columns, out)),
                         stops=(0, len(check.words)))


def _masked_command(args: tuple, kwargs: dict, errstate: dict):
    """`_masked` as a native command: its rows copied (unless in place), the masked rows' first columns
    zeroed."""
    (a, keep, columns), out = args, kwargs.get("out")
    if not (a.__class__ is np.ndarray and a.ndim == 2 and _rows_of(out, a.shape[0]) and _flat_mask(keep, a.shape[0])
            and a.shape == out.shape and a.dtype == out.dtype and a.strides[1] == a.itemsize):
        return None
    zeros = _zeros(keep, out, columns)
    if a.ctypes.data == out.ctypes.data and a.strides == out.strides:
        return zeros
    if np.may_share_memory(a, out):
        return None
    row = out.shape[1] * out.itemsize
    return native_runner.sequence(native_runner.copy_words(out.shape[0], row, (a.ctypes.data, a.strides[0]),
                                                           (out.ctypes.data, out.strides[0])), zeros)


def _zeros(keep, out, columns: int):
    """The command zeroing the first ``columns`` columns of ``out``'s rows that ``keep`` drops."""
    return native_runner.zero_rows_words(keep.ctypes.data, out.shape[0], (out.ctypes.data, out.strides[0]),
                                         columns * out.itemsize)


def _rows_of(out, rows: int) -> bool:
    """Whether ``out`` is a writable C-contiguous float matrix of ``rows`` (at least one) rows."""
    return (out.__class__ is np.ndarray and out.ndim == 2 and out.shape[0] == rows > 0 and out.shape[1] > 0
            and out.flags.c_contiguous and out.flags.writeable and out.dtype in native_runner.MAP_DTYPES)


def _flat_mask(keep, rows: int) -> bool:
    """Whether ``keep`` is a contiguous boolean array of ``rows`` elements, one byte each."""
    return keep.__class__ is np.ndarray and keep.dtype == np.bool_ and keep.size == rows and keep.flags.c_contiguous


_forward.__wrapped_operation__.native_command = _forward_command
_masked.__wrapped_operation__.native_command = _masked_command
