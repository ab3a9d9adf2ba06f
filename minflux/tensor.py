"""Tensor: an array value plus, inside `gradient`, its slot on the tape."""
from __future__ import annotations

import numpy as np


class Tensor:
    """An array that records the operations applied to it while `mf.gradient` runs.

    Users rarely build Tensors: `gradient` wraps the arrays it differentiates, and every minflux op
    accepts arrays, Tensors and Python numbers alike. ``np.asarray(t)`` gives the value back.

    >>> import minflux as mf, numpy as np
    >>> t = mf.Tensor(np.array([1.0, 2.0]))
    >>> (t * 3 + 1).value
    array([4., 7.])
    """

    __slots__ = ("value", "_tape", "_slot", "__weakref__")
    __array_ufunc__ = None  # so that `ndarray + Tensor` defers to Tensor.__radd__
    __array_priority__ = 1000
    _is_minflux_tensor = True

    def __init__(self, value, tape=None, slot: int = 0):
        self.value = value
        self._tape = tape
        self._slot = slot

    # -- array protocol ------------------------------------------------------------------------
    shape = property(lambda self: self.value.shape, doc="The shape of the value.")
    dtype = property(lambda self: self.value.dtype, doc="The dtype of the value.")
    ndim = property(lambda self: self.value.ndim, doc="The number of dimensions.")
    size = property(lambda self: self.value.size, doc="The number of elements.")

    def __array__(self, dtype=None, copy=None):
        from .backend import to_numpy

        out = to_numpy(self.value)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __len__(self):
        return len(self.value)

    def __float__(self):
        return float(self.value)

    def __int__(self):
        return int(self.value)

    def __bool__(self):
        return bool(self.value)

    def item(self):
        """The value of a one-element Tensor as a Python number."""
        return self.value.item()

    def numpy(self):
        """The value as a numpy array (copied from the GPU when needed)."""
        return np.asarray(self)

    def __repr__(self):
        tracked = ", tracked" if self._tape is not None else ""
        return f"Tensor({self.value!r}{tracked})"

    def __setitem__(self, index, value):
        raise TypeError(
            "Tensors are immutable inside a gradient computation: `t[i] = v` would silently lose the "
            "gradient. Build the result instead, e.g. with mf.where(mask, v, t) or mf.concatenate.")

    # -- operators: each one is an op of the elementwise table or a structural op ----------------
    def __add__(self, other): return _ew.add(self, other)
    def __radd__(self, other): return _ew.add(other, self)
    def __sub__(self, other): return _ew.subtract(self, other)
    def __rsub__(self, other): return _ew.subtract(other, self)
    def __mul__(self, other): return _ew.multiply(self, other)
    def __rmul__(self, other): return _ew.multiply(other, self)
    def __truediv__(self, other): return _ew.divide(self, other)
    def __rtruediv__(self, other): return _ew.divide(other, self)
    def __floordiv__(self, other): return _ew.floor_divide(self, other)
    def __rfloordiv__(self, other): return _ew.floor_divide(other, self)
    def __mod__(self, other): return _ew.mod(self, other)
    def __rmod__(self, other): return _ew.mod(other, self)
    def __pow__(self, other): return _ew.power(self, other)
    def __rpow__(self, other): return _ew.power(other, self)
    def __neg__(self): return _ew.negative(self)
    def __pos__(self): return self
    def __abs__(self): return _ew.abs(self)
    def __lt__(self, other): return _ew.less(self, other)
    def __le__(self, other): return _ew.less_equal(self, other)
    def __gt__(self, other): return _ew.greater(self, other)
    def __ge__(self, other): return _ew.greater_equal(self, other)
    def __eq__(self, other): return _ew.equal(self, other)
    def __ne__(self, other): return _ew.not_equal(self, other)
    __hash__ = object.__hash__

    def __matmul__(self, other): return _ops.matmul(self, other)
    def __rmatmul__(self, other): return _ops.matmul(other, self)
    def __getitem__(self, index): return _ops.getitem(self, index)

    def __iter__(self):
        """Iterate over the first axis through one `mf.unstack` node (not one slice node per item)."""
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d Tensor")
        return iter(_ops.unstack(self))

    @property
    def T(self):
        """The transpose (all axes reversed)."""
        return _ops.transpose(self)

    def reshape(self, *shape):
        """``mf.reshape(self, shape)``; accepts ``t.reshape(2, 3)`` and ``t.reshape((2, 3))``."""
        return _ops.reshape(self, shape[0] if len(shape) == 1 else shape)

    def sum(self, axis=None, keepdims=False):
        """``mf.sum(self, axis, keepdims)``."""
        return _ops.sum(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False):
        """``mf.mean(self, axis, keepdims)``."""
        return _ops.mean(self, axis=axis, keepdims=keepdims)

    def max(self, axis=None, keepdims=False):
        """``mf.max(self, axis, keepdims)``."""
        return _ops.max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False):
        """``mf.min(self, axis, keepdims)``."""
        return _ops.min(self, axis=axis, keepdims=keepdims)

    def transpose(self, *axes):
        """``mf.transpose(self, axes)``; accepts ``t.transpose(1, 0)`` and ``t.transpose((1, 0))``."""
        return _ops.transpose(self, (axes[0] if len(axes) == 1 else axes) if axes else None)


from . import elementwise as _ew  # noqa: E402  (operators need the op modules; they need Tensor)
from . import ops as _ops  # noqa: E402
