"""Flat buffers for collectives: a tree's array leaves grouped by dtype and packed one after another.

A collective moves one buffer per dtype, in buckets, instead of one call per array
(`minflux.distributed`); these helpers build the buffers and hand each array back its slice.

>>> import numpy as np
>>> a, b = np.ones(2), np.arange(3.0)
>>> flat = pack(np, [a, b], np.dtype("float64"), 2)
>>> flat.tolist()
[1.0, 1.0, 0.0, 1.0, 2.0, 0.0]
>>> unpack(flat, [a, b])[id(b)].tolist()
[0.0, 1.0, 2.0]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import backend
from . import tree as _tree
from .tensor import unwrap

__all__ = ["array_leaves", "array_module", "bucket_elements", "by_dtype", "pack", "unpack"]


def array_leaves(tree: Any) -> list:
    """The distinct array leaves of ``tree`` (tied arrays once), in walk order."""
    return _tree.leaves(tree, trainable_only=False)


def array_module(arrays: list, what: str):
    on_gpu = [backend.is_cupy_array(unwrap(a)) for a in arrays]
    if any(on_gpu) and not all(on_gpu):
        raise backend.DeviceError(f"{what} got numpy and CuPy arrays in one tree; move the whole tree to "
                                  "one device first (mf.to_device(tree, 'gpu') or 'cpu')")
    return backend.cupy_module() if any(on_gpu) else np


def by_dtype(arrays: list) -> dict:
    """Arrays grouped by dtype, in first-appearance order."""
    groups: dict = {}
    for a in arrays:
        groups.setdefault(np.dtype(unwrap(a).dtype), []).append(a)
    return groups


def pack(xp, arrays: list, dtype, multiple: int):
    """One flat buffer holding ``arrays`` one after another, zero-padded to a multiple of ``multiple``."""
    total = sum(int(unwrap(a).size) for a in arrays)
    flat = xp.empty(-(-total // multiple) * multiple, dtype)
    flat[total:] = 0
    offset = 0
    for a in arrays:
        v = unwrap(a)
        flat[offset:offset + v.size] = v.reshape(-1)
        offset += v.size
    return flat


def unpack(flat, arrays: list) -> dict:
    """``id(array) -> its slice of flat``, shaped like the array."""
    out, offset = {}, 0
    for a in arrays:
        v = unwrap(a)
        out[id(a)] = flat[offset:offset + v.size].reshape(v.shape)
        offset += v.size
    return out


def bucket_elements(bucket_bytes: int, itemsize: int, ranks: int) -> int:
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    return max(ranks, (bucket_bytes // itemsize) // ranks * ranks)
