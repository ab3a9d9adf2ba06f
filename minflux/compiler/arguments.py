"""The arguments of a compiled scalar function: what kind each value is, the kernel's float type, the
values as arrays of their kinds' dtypes, and the shape they broadcast to.

`classify` looks at one value; `prepare` does the whole job for a call's values (the path of
`minflux.compiler.compiled` functions, which meet new values at every call); a function
built from expressions (`minflux.compiler.expressions`) classifies each argument when the argument is
made and converts it once, when the function runs.

>>> import numpy as np
>>> classify(np.arange(3, dtype=np.int32)), classify(2.5), classify("x")
(('i', dtype('int32')), ('f', None), None)
>>> kinds, float_dtype, arrays, shape = prepare([np.ones((2, 1), np.float32), 3], "f")
>>> kinds, float_dtype, shape
(('f', 'i'), dtype('float32'), (2, 1))
"""
from __future__ import annotations

import functools

import numpy as np

from ..backend import get_array_module
from .dtypes import FLOAT_DTYPES, kind_dtype

__all__ = ["broadcast_shape", "classify", "convert", "converted", "float_dtype_of", "prepare"]

_ARRAY_KINDS = {"b": "b", "i": "i", "u": "i", "f": "f"}


def classify(value) -> tuple[str, np.dtype | None] | None:
    """``(kind, dtype)`` of one argument, or None when no kernel takes it.

    The kind is the IR kind (``"b"``, ``"i"``, ``"f"``); the dtype is the value's own dtype (an int32
    array keeps int32 here, and becomes int64 only when converted), None for a Python number or a
    numpy integer or bool scalar (numbers that carry no float type into the kernel).

    >>> import numpy as np
    >>> classify(True), classify(np.int64(3)), classify(np.float32(1.5)), classify(np.ones(2, complex))
    (('b', None), ('i', None), ('f', dtype('float32')), None)
    """
    if value.__class__ is np.ndarray:   # the common case first
        dtype = value.dtype
        kind = _ARRAY_KINDS.get(dtype.kind)
        return None if kind is None else (kind, dtype)
    if isinstance(value, (bool, np.bool_)):
        return "b", None
    if isinstance(value, (int, np.integer)):
        return "i", None
    if isinstance(value, float) and not hasattr(value, "shape"):
        return "f", None
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    dtype = np.dtype(dtype)
    kind = _ARRAY_KINDS.get(dtype.kind)
    return None if kind is None else (kind, dtype)


@functools.lru_cache(maxsize=256)
def float_dtype_of(dtypes: tuple) -> np.dtype:
    """The kernel's float type for float arguments of ``dtypes``: numpy's promotion, float64 without any.

    >>> import numpy as np
    >>> float_dtype_of((np.dtype(np.float32),)), float_dtype_of(())
    (dtype('float32'), dtype('float64'))
    """
    return np.dtype(np.result_type(*dtypes)) if dtypes else np.dtype(np.float64)


@functools.lru_cache(maxsize=1024)
def broadcast_shape(shapes: tuple) -> tuple:
    """The shape ``shapes`` broadcast to (a ValueError when they do not).

    >>> broadcast_shape(((2, 1), (3,), ()))
    (2, 3)
    """
    return tuple(np.broadcast_shapes(*shapes))


def convert(value, kind: str, float_dtype, xp):
    """An argument as an array (or 0-d array) of its kind's dtype, the value itself when it is one.

    >>> import numpy as np
    >>> convert(3, "f", np.float32, np)
    array(3., dtype=float32)
    """
    dtype = kind_dtype(kind, float_dtype)
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return value if value.dtype == dtype else value.astype(dtype)
    if xp is not np:  # CuPy kernels take numpy scalars by value: no host-to-device copy per call
        return dtype.type(value)
    return xp.asarray(value, dtype=dtype)


def _kind_and_dtype(value, position: int, name: str):
    found = classify(value)
    if found is not None:
        return found
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        raise TypeError(f"argument {position} of elementwise function {name} is a {type(value).__name__}; "
                        "pass arrays, Tensors or Python numbers")
    raise TypeError(f"argument {position} of elementwise function {name} has dtype {dtype}; use "
                    "float, int or bool arrays")


def prepare(values, name: str, float_dtype=None):
    """Classify and convert a call's arguments (plain arrays and numbers).

    Returns ``(kinds, float_dtype, arrays, shape)``: each argument's IR kind, the kernel's float
    dtype (the float arrays' promoted dtype, float64 when there are none; ``float_dtype`` when
    given, which must hold every float argument exactly), the arguments as arrays of their kinds'
    dtypes, and the broadcast shape.

    >>> import numpy as np
    >>> prepare([np.ones((2, 1), np.float32), 3], "f")[::3]
    (('f', 'i'), (2, 1))
    """
    if float_dtype is None and values and _all_float_arrays_of_one_dtype(values):   # the common call, at once
        return ("f",) * len(values), values[0].dtype, list(values), _broadcast_shape(values, name)
    xp = get_array_module(*values, op=f"elementwise function {name}")
    kd = [_kind_and_dtype(v, i, name) for i, v in enumerate(values)]
    kinds = tuple(k for k, _ in kd)
    if float_dtype is None:
        float_dtype = float_dtype_of(tuple(d for k, d in kd if k == "f" and d is not None))
    else:
        float_dtype = np.dtype(float_dtype)
    return kinds, float_dtype, *converted(values, kinds, float_dtype, xp, name)


def converted(values, kinds: tuple, float_dtype, xp, name: str) -> tuple[list, tuple]:
    """``(arrays, shape)``: ``values`` converted to their ``kinds``' dtypes and their broadcast shape.

    >>> import numpy as np
    >>> converted([1, np.ones(2)], ("i", "f"), np.float64, np, "f")
    ([array(1), array([1., 1.])], (2,))
    """
    arrays = [convert(v, k, float_dtype, xp) for v, k in zip(values, kinds)]
    return arrays, _broadcast_shape(arrays, name)


def _all_float_arrays_of_one_dtype(values) -> bool:
    if values[0].__class__ is not np.ndarray:
        return False
    dtype = values[0].dtype
    return dtype in FLOAT_DTYPES and all(v.__class__ is np.ndarray and v.dtype == dtype for v in values)


def _broadcast_shape(arrays, name: str) -> tuple:
    try:
        return broadcast_shape(tuple([a.shape for a in arrays]))
    except ValueError:
        shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
        raise ValueError(f"elementwise function {name}: cannot broadcast argument shapes {shapes}") from None
