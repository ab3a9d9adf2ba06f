"""The addresses of arrays' first elements, for handing arrays to compiled kernels.

``ndarray.ctypes.data`` builds a ctypes helper object on every read (0.75 us); a kernel launch with
twenty arrays spent 16 us there, more than half of what its kernel took. numpy's array object is the
Python object header followed by the data pointer (``PyArrayObject_fields.data``, what
``PyArray_DATA`` reads), so the address is read at ``id(a) + object.__basicsize__`` in 0.1 us. That
layout is checked once, at import, against ``.ctypes.data``; where it does not hold, every read takes
the slow way.

>>> import numpy as np
>>> a = np.arange(6.0)
>>> pointers([a, a[2:]]) == [a.ctypes.data, a.ctypes.data + 16]
True
"""
from __future__ import annotations

import ctypes

import numpy as np

__all__ = ["pointers"]

_HEADER = object.__basicsize__
_address_at = ctypes.c_size_t.from_address


def _read_in_place(arrays) -> list:
    return [_address_at(id(a) + _HEADER).value if a.__class__ is np.ndarray else a.ctypes.data
            for a in arrays]


def _read_through_ctypes(arrays) -> list:
    return [a.ctypes.data for a in arrays]


def _layout_holds() -> bool:
    probes = [np.arange(5.0)[2:], np.zeros((3, 4), np.float32).T, np.empty(0)]
    return all(_address_at(id(p) + _HEADER).value == p.ctypes.data for p in probes)


pointers = _read_in_place if _layout_holds() else _read_through_ctypes
"""``pointers(arrays)``: the address of each array's first element (a list of ints)."""
