"""Tensor: an array value plus, inside `gradient`, its slot on the tape.

This module imports nothing else of minflux: the operators, conversions and array methods of Tensor
are installed by `minflux._operators` when the package is imported.

A Tensor may also be *deferred* (`Tensor.deferred`): it knows its shape and dtype and holds a pending
computation instead of a value (inside `mf.gradient`, elementwise ops return such Tensors so that
they fuse, `minflux.pointwise.lazy`). Reading ``value`` runs the computation, which gives the Tensor
its value (and its slot on the tape) through `minflux.autograd.bind`.
"""
from __future__ import annotations



class Tensor:
    """An array that records the operations applied to it while `mf.gradient` runs.

    Users rarely build Tensors: `gradient` wraps the arrays it differentiates, and every minflux op
    accepts arrays, Tensors and Python numbers alike. ``np.asarray(t)`` gives the value back.

    >>> import minflux as mf, numpy as np
    >>> t = mf.Tensor(np.array([1.0, 2.0]))
    >>> (t * 3 + 1).value
    array([4., 7.])
    """

    __slots__ = ("_value", "_pending", "_tape", "_slot", "__weakref__")
    __array_ufunc__ = None  # `ndarray + Tensor` defers to Tensor.__radd__ (see _operators._UfuncOverride)
    __array_priority__ = 1000

    def __init__(self, value, tape=None, slot: int = 0):
        self._value = value
        self._pending = None
        self._tape = tape
        self._slot = slot

    @property
    def value(self):
        """The array (computing a deferred Tensor's pending expression first)."""
        if self._pending is not None:
            self._pending.compute(self)
        return self._value

    @property
    def is_deferred(self) -> bool:
        """True while the value is a pending computation, not yet run."""
        return self._pending is not None

    @property
    def pending(self):
        """The pending computation of a deferred Tensor (None once it has its value)."""
        return self._pending

    # -- array protocol ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        """The shape of the value (known without computing a deferred value)."""
        pending = self._pending
        return pending.shape if pending is not None else self._value.shape

    @property
    def dtype(self):
        """The dtype of the value (known without computing a deferred value)."""
        pending = self._pending
        return pending.dtype if pending is not None else self._value.dtype

    ndim = property(lambda self: len(self.shape), doc="The number of dimensions.")
    size = property(lambda self: _prod(self.shape), doc="The number of elements.")

    def __len__(self):
        return len(self.value)

    def __int__(self):
        return int(self.value)

    def __bool__(self):
        return bool(self.value)

    def item(self):
        """The value of a one-element Tensor as a Python number."""
        return self.value.item()

    def __repr__(self):
        tracked = ", tracked" if self._tape is not None else ""
        return f"Tensor({self.value!r}{tracked})"

    @classmethod
    def deferred(cls, pending, tape) -> "Tensor":
        """A Tensor whose value is ``pending``: an object with ``shape``, ``dtype`` and
        ``compute(tensor)``, which gives ``tensor`` its value (`minflux.autograd.bind`) when it is read.

        >>> import numpy as np
        >>> class Ones:
        ...     shape, dtype = (2,), np.dtype(np.float64)
        ...     def compute(self, tensor):
        ...         from minflux.autograd import bind
        ...         bind(tensor, np.ones(2))
        >>> t = Tensor.deferred(Ones(), None)
        >>> t.is_deferred, t.shape, t.value, t.is_deferred
        (True, (2,), array([1., 1.]), False)
        """
        t = cls(None, tape)
        t._pending = pending
        return t

    def __setitem__(self, index, value):
        raise TypeError(
            "Tensors are immutable inside a gradient computation: `t[i] = v` would silently lose the "
            "gradient. Build the result instead, e.g. with mf.where(mask, v, t) or mf.concatenate.")


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def unwrap(x):
    """The array inside a Tensor; anything else is returned as it is.

    >>> import numpy as np
    >>> unwrap(Tensor(np.ones(1))), unwrap(2.0)
    (array([1.]), 2.0)
    """
    return x.value if isinstance(x, Tensor) else x
