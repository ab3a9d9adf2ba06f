"""Casting a value to another dtype, with the gradient cast back."""
from __future__ import annotations

import numpy as np

from ..autograd import record
from ._common import value_of


def astype(x, dtype):
    """``x`` as an array of ``dtype``. Between float dtypes the gradient flows (cast back to ``x``'s
    dtype); a cast to an integer or bool dtype has no gradient.

    >>> import minflux as mf, numpy as np
    >>> mf.astype(np.array([1.5, 2.5]), np.float32)
    array([1.5, 2.5], dtype=float32)
    >>> mf.gradient(lambda x: mf.sum(mf.astype(x, np.float32) * 2), np.ones(2))[0]
    array([2., 2.])
    """
    value = value_of(x)
    dtype = np.dtype(dtype)
    out = value.astype(dtype)
    source = value.dtype
    if dtype.kind not in "fc" or np.dtype(source).kind not in "fc":
        return record("astype", out, [], lambda g, needs: [])   # a constant: nothing flows back
    return record("astype", out, [x], lambda g, needs: [g.astype(source)])
