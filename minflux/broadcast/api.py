"""Provisional elementwise API: runs the scalar function directly on arrays or Tensors.

This module is replaced by the broadcast compiler; until then branch-free scalar functions work
(each operator becomes one broadcast node), functions with data-dependent control flow do not.
"""
from __future__ import annotations

import functools


def elementwise(fn):
    """Mark ``fn`` as a scalar function to be broadcast over arrays.

    >>> import minflux as mf, numpy as np
    >>> @mf.elementwise
    ... def axpy(a, x, y):
    ...     return a * x + y
    >>> axpy(2.0, np.ones(2), np.ones(2))
    array([3., 3.])
    """
    @functools.wraps(fn)
    def wrapper(*args):
        return fn(*args)
    return wrapper


def broadcast(fn, *args, mode: str = "mixed"):
    """Broadcast scalar function ``fn`` over ``args``.

    >>> import minflux as mf, numpy as np
    >>> mf.broadcast(lambda x: x * 2, np.ones(2))
    array([2., 2.])
    """
    return fn(*args)
