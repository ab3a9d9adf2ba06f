"""The array dtype of each IR kind: the one mapping every backend uses."""
from __future__ import annotations

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
"""The float types a kernel computes in."""


def kind_dtype(kind: str, float_dtype) -> np.dtype:
    """The array dtype that holds values of IR ``kind`` (``"b"``, ``"i"``, ``"f"``) in a kernel whose
    float type is ``float_dtype``.

    >>> kind_dtype("i", np.float32), kind_dtype("f", "float32"), kind_dtype("b", np.float64)
    (dtype('int64'), dtype('float32'), dtype('bool'))
    """
    if kind == "f":
        return np.dtype(float_dtype)
    if kind == "i":
        return np.dtype(np.int64)
    if kind == "b":
        return np.dtype(bool)
    raise ValueError(f"unknown IR kind {kind!r}")
