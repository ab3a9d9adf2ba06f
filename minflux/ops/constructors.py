"""Array constructors: zeros, ones, full, their ``_like`` forms, arange and one_hot.

New arrays are constants (nothing to differentiate). Floating results default to
``mf.default_dtype()``; ``like=`` (any array or Tensor) puts the result on that array's device, so
code written once runs on numpy and CuPy.
"""
from __future__ import annotations

import numpy as np

from ..backend import as_array, default_dtype, get_array_module
from ._common import value_of


def _module(like, op: str):
    return np if like is None else get_array_module(value_of(like), op=op)


def _shape(shape, op: str) -> tuple:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(not isinstance(n, (int, np.integer)) or n < 0 for n in shape):
        raise ValueError(f"{op}: shape must be non-negative integers, got {shape}")
    return tuple(int(n) for n in shape)


def _float_dtype(dtype):
    return default_dtype() if dtype is None else np.dtype(dtype)


def zeros(shape, dtype=None, *, like=None):
    """An array of zeros (``mf.default_dtype()`` unless ``dtype`` is given; on ``like``'s device).

    >>> import minflux as mf
    >>> mf.zeros((2, 3)).shape, mf.zeros(2).dtype
    ((2, 3), dtype('float32'))
    """
    return _module(like, "mf.zeros").zeros(_shape(shape, "mf.zeros"), dtype=_float_dtype(dtype))


def ones(shape, dtype=None, *, like=None):
    """An array of ones (``mf.default_dtype()`` unless ``dtype`` is given; on ``like``'s device).

    >>> import minflux as mf
    >>> mf.ones(3)
    array([1., 1., 1.], dtype=float32)
    """
    return _module(like, "mf.ones").ones(_shape(shape, "mf.ones"), dtype=_float_dtype(dtype))


def _fill_dtype(fill_value, dtype):
    if dtype is not None:
        return np.dtype(dtype)
    if isinstance(fill_value, (bool, np.bool_)):
        return np.dtype(bool)
    if isinstance(fill_value, (int, np.integer)):
        return np.dtype(np.int64)
    if isinstance(fill_value, float):
        return default_dtype()
    return np.asarray(value_of(fill_value)).dtype if not hasattr(fill_value, "dtype") else fill_value.dtype


def full(shape, fill_value, dtype=None, *, like=None):
    """An array filled with ``fill_value``; a Python float gives ``mf.default_dtype()``, an int int64.

    >>> import minflux as mf
    >>> mf.full((2,), 7)
    array([7, 7])
    >>> mf.full(2, 0.5)
    array([0.5, 0.5], dtype=float32)
    """
    xp = _module(like, "mf.full")
    return xp.full(_shape(shape, "mf.full"), value_of(fill_value), dtype=_fill_dtype(fill_value, dtype))


def zeros_like(x, dtype=None):
    """Zeros of ``x``'s shape, dtype (unless ``dtype`` is given) and device.

    >>> import minflux as mf, numpy as np
    >>> mf.zeros_like(np.ones((2, 2), np.int32))
    array([[0, 0],
           [0, 0]], dtype=int32)
    """
    v = value_of(x)
    return get_array_module(v, op="mf.zeros_like").zeros_like(v, dtype=dtype)


def ones_like(x, dtype=None):
    """Ones of ``x``'s shape, dtype (unless ``dtype`` is given) and device.

    >>> import minflux as mf, numpy as np
    >>> mf.ones_like(np.zeros(2))
    array([1., 1.])
    """
    v = value_of(x)
    return get_array_module(v, op="mf.ones_like").ones_like(v, dtype=dtype)


def full_like(x, fill_value, dtype=None):
    """``fill_value`` in ``x``'s shape, dtype (unless ``dtype`` is given) and device.

    >>> import minflux as mf, numpy as np
    >>> mf.full_like(np.zeros(2, np.float32), 3)
    array([3., 3.], dtype=float32)
    """
    v = value_of(x)
    return get_array_module(v, op="mf.full_like").full_like(v, value_of(fill_value), dtype=dtype)


def arange(start, stop=None, step=1, dtype=None, *, like=None):
    """Evenly spaced values in ``[start, stop)``, as ``numpy.arange``: integers for integer
    arguments, ``mf.default_dtype()`` when any is a float (unless ``dtype`` is given).

    >>> import minflux as mf
    >>> mf.arange(4)
    array([0, 1, 2, 3])
    >>> mf.arange(0.0, 1.0, 0.25)
    array([0.  , 0.25, 0.5 , 0.75], dtype=float32)
    """
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ValueError("mf.arange: step must not be zero")
    if dtype is None:
        floats = any(isinstance(a, (float, np.floating)) for a in (start, stop, step))
        dtype = default_dtype() if floats else np.dtype(np.int64)
    xp = _module(like, "mf.arange")
    if np.dtype(dtype).kind == "f":  # step in float64, then round once: no drift in float32
        return xp.arange(start, stop, step, dtype=np.float64).astype(dtype)
    return xp.arange(start, stop, step, dtype=dtype)


def one_hot(indices, num_classes: int, dtype=None, axis: int = -1):
    """One-hot vectors of length ``num_classes`` for integer ``indices``, on a new ``axis``.

    Out-of-range indices are an error (negative ones included). The result is a constant.

    >>> import minflux as mf, numpy as np
    >>> mf.one_hot(np.array([2, 0]), 3)
    array([[0., 0., 1.],
           [1., 0., 0.]], dtype=float32)
    """
    idx = value_of(indices)
    xp = get_array_module(idx, op="mf.one_hot")
    idx = as_array(xp, idx)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"mf.one_hot: indices must be integers, got dtype {idx.dtype}")
    if not isinstance(num_classes, (int, np.integer)) or num_classes <= 0:
        raise ValueError(f"mf.one_hot: num_classes must be a positive int, got {num_classes!r}")
    if xp is np and idx.size and (idx.min() < 0 or idx.max() >= num_classes):
        raise ValueError(f"mf.one_hot: indices must lie in [0, {num_classes}), got values from "
                         f"{idx.min()} to {idx.max()}")
    out = (idx[..., None] == xp.arange(num_classes)).astype(_float_dtype(dtype))
    if axis != -1:
        out = xp.moveaxis(out, -1, axis)
    return out
