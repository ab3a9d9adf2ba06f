"""The transposed weight of an input gradient, made contiguous once and shared by every product.

The input gradient of ``x @ w`` is ``g @ w.T``. OpenBLAS multiplies a few rows by a contiguous matrix
that fits the cache 1.3-1.8x faster than by a transposed view of one (measured at 16-128 rows and
weights up to 1.5 MB; from about 3 MB on the view is as fast or faster). A recurrent model multiplies
the same tracked weight at every time step, so for a weight that small, used by two or more products
on the tape, the contiguous transpose is made once per gradient call and shared by every step's
input gradient. A tracked Tensor's value does not change while its tape lives, so the copy cannot go
stale; holders are found through a weak reference to the Tensor and go with it.

>>> import numpy as np
>>> from minflux.tensor import Tensor
>>> w = Tensor(np.arange(6.0).reshape(2, 3))
>>> first, second = shared_transpose(w, w.value), shared_transpose(w, w.value)
>>> t = first.get()
>>> first is second, t.flags.c_contiguous, t is second.get(), bool((t == w.value.T).all())
(True, True, True, True)
"""
from __future__ import annotations

import weakref

import numpy as np

from ..backend import is_numpy_array
from ..tensor import Tensor

__all__ = ["CONTIGUOUS_MAX_BYTES", "SharedTranspose", "shared_transpose"]

CONTIGUOUS_MAX_BYTES = 2**21
"""Weights up to this size get a shared contiguous transpose; larger ones are read transposed."""


class SharedTranspose:
    """The transpose of one tracked weight for the input gradients of the products that use it."""

    __slots__ = ("value", "uses", "copy")

    def __init__(self, value):
        self.value, self.uses, self.copy = value, 0, None

    def get(self):
        """The contiguous transpose once two or more products use the weight, else the view.

        >>> import numpy as np
        >>> holder = SharedTranspose(np.ones((2, 3)))
        >>> holder.uses = 1; holder.get().flags.c_contiguous
        False
        >>> holder.uses = 2; holder.get().flags.c_contiguous
        True
        """
        if self.uses < 2:
            return self.value.T
        if self.copy is None:
            t = self.value.T
            # a float's C-order copy as a ufunc, which a recorded schedule writes into a buffer it owns
            self.copy = np.positive(t, order="C") if t.dtype.kind == "f" else t.copy(order="C")
        return self.copy


_holders: dict = {}   # id(Tensor) -> (a weak reference to it, its SharedTranspose), while it lives


def shared_transpose(w, value) -> SharedTranspose:
    """The holder of ``value.T`` for a product multiplying by ``w`` (whose array is ``value``), counted
    as one more use; a fresh, unshared one where sharing does not apply."""
    if not (value.ndim == 2 and value.nbytes <= CONTIGUOUS_MAX_BYTES and isinstance(w, Tensor)
            and is_numpy_array(value)):
        return SharedTranspose(value)
    key = id(w)
    found = _holders.get(key)
    if found is not None and found[0]() is w and found[1].value is value:
        holder = found[1]
    else:   # by identity: a Tensor's == is elementwise, so it cannot key a WeakKeyDictionary
        holder = SharedTranspose(value)
        _holders[key] = (weakref.ref(w, lambda _, key=key: _forget(key)), holder)
    holder.uses += 1
    return holder


def _forget(key: int) -> None:
    found = _holders.get(key)
    if found is not None and found[0]() is None:
        del _holders[key]
