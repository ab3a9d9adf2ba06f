"""Array backends: numpy on the CPU, CuPy on NVIDIA GPUs, chosen by the arrays themselves."""
from __future__ import annotations

from typing import Any

import numpy as np

from .schedule.operation import operation
from .schedule.traced import Traced
from .tensor import unwrap

try:  # CuPy is the optional `gpu` extra.
    import cupy as _cupy
except Exception:  # pragma: no cover - depends on the machine
    _cupy = None

_DEFAULT_DTYPE = np.dtype(np.float32)


def cupy_module():
    """The CuPy module, or None when CuPy is not installed (or cannot be imported here).

    >>> cupy_module() is None or cupy_module().__name__ == "cupy"
    True
    """
    return _cupy


class DeviceError(RuntimeError):
    """An operation needs a device that is missing, or mixes arrays from two devices.

    >>> import minflux as mf
    >>> issubclass(mf.DeviceError, RuntimeError)
    True
    """


def default_dtype() -> np.dtype:
    """The floating dtype used for new parameters and data (float32 unless changed).

    >>> import minflux as mf
    >>> mf.default_dtype()
    dtype('float32')
    """
    return _DEFAULT_DTYPE


def set_default_dtype(dtype) -> None:
    """Set the floating dtype used for new parameters and data.

    >>> import minflux as mf, numpy as np
    >>> mf.set_default_dtype(np.float64); mf.default_dtype()
    dtype('float64')
    >>> mf.set_default_dtype(np.float32)
    """
    global _DEFAULT_DTYPE
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        raise TypeError(f"the default dtype must be a floating type such as float32, got {dtype}")
    _DEFAULT_DTYPE = dtype


def is_cupy_array(x: Any) -> bool:
    """True for a CuPy array (always False without CuPy).

    >>> import numpy as np
    >>> is_cupy_array(np.zeros(1))
    False
    """
    return _cupy is not None and isinstance(x, _cupy.ndarray)


def is_array(x: Any) -> bool:
    """True for a numpy or CuPy array (the leaves of parameter trees), or the stand-in of one while
    `minflux.compile` records (`minflux.schedule.Traced`).

    >>> import minflux as mf, numpy as np
    >>> mf.is_array(np.zeros(2)), mf.is_array([0.0])
    (True, False)
    """
    return isinstance(x, np.ndarray) or is_cupy_array(x) or (x.__class__ is Traced and is_array(x.recorded_value))


def as_array(xp, x, dtype=None):
    """``xp.asarray(x, dtype)``, except that an array already of that dtype (a recorded one too, see
    `minflux.compile`) is returned as it is.

    >>> import numpy as np
    >>> a = np.ones(2)
    >>> as_array(np, a) is a, as_array(np, 3, np.float32)
    (True, array(3., dtype=float32))
    """
    if x.__class__ is Traced:
        return x if dtype is None or x.dtype == dtype else x.astype(dtype)
    return xp.asarray(x) if dtype is None else xp.asarray(x, dtype=dtype)


def is_numpy_array(x: Any) -> bool:
    """True for a numpy array (exactly ``numpy.ndarray``), or one being recorded by `minflux.compile`.

    >>> import numpy as np
    >>> is_numpy_array(np.zeros(1)), is_numpy_array(np.float64(1.0))
    (True, False)
    """
    cls = x.__class__
    return cls is np.ndarray or (cls is Traced and x.recorded_value.__class__ is np.ndarray)


def gpu_available() -> bool:
    """True when CuPy is installed and sees at least one CUDA device.

    >>> import minflux as mf
    >>> isinstance(mf.gpu_available(), bool)
    True
    """
    if _cupy is None:
        return False
    try:
        return _cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def get_array_module(*xs: Any, op: str = "this operation"):
    """Return ``numpy`` or ``cupy``: the module that owns the given arrays (Tensors count by value).

    Mixing numpy and CuPy arrays is an error that names the operation and the fix.

    >>> import minflux as mf, numpy as np
    >>> mf.get_array_module(np.ones(2), 3.0).__name__
    'numpy'
    """
    if _cupy is None:
        return np
    found_numpy = found_cupy = None
    for x in xs:
        x = unwrap(x)
        if x.__class__ is Traced:   # an array being recorded: the module of the array it stands for
            x = x.recorded_value
        if isinstance(x, np.ndarray):
            found_numpy = x
        elif isinstance(x, _cupy.ndarray):
            found_cupy = x
    if found_cupy is None:
        return np
    if found_numpy is not None:
        raise DeviceError(
            f"{op} got a numpy.ndarray and a cupy.ndarray; all arrays of one call must live on one "
            "device. Move the model and data together with `model = mf.to_device(model, \"gpu\")` "
            "and `batch = mf.to_device(batch, \"gpu\")` (or \"cpu\" for both)."
        )
    return _cupy


@operation(results="new")
def scatter_add(buffer, index, values) -> None:
    """``buffer[index] += values`` in place, where repeated indices add up (numpy's ``add.at``).

    A single integer array indexing the first axis (an embedding-table gradient) takes a sort-based
    path that is several times faster than ``numpy.add.at`` when indices repeat a lot.

    >>> import numpy as np
    >>> table = np.zeros((3, 2))
    >>> scatter_add(table, np.array([2, 0, 2]), np.ones((3, 2)))
    >>> table
    array([[1., 1.],
           [0., 0.],
           [2., 2.]])
    """
    if is_cupy_array(buffer):
        import cupyx

        cupyx.scatter_add(buffer, index, values)
        return
    if isinstance(index, np.ndarray) and index.dtype.kind in "iu" and index.size > 1:
        _add_rows(buffer, index, values)
    else:
        np.add.at(buffer, index, values)


def _add_rows(buffer, index, values) -> None:
    rows = index.reshape(-1)
    if rows.dtype.kind == "i":
        rows = np.where(rows < 0, rows + buffer.shape[0], rows)  # -1 and n-1 are one row
    values = np.broadcast_to(values, index.shape + buffer.shape[1:]).reshape((rows.size,) + buffer.shape[1:])
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    starts = np.flatnonzero(np.concatenate(([True], rows[1:] != rows[:-1])))
    buffer[rows[starts]] += np.add.reduceat(values[order], starts, axis=0)


def to_numpy(x):
    """A numpy array holding ``x`` (an array, a Tensor, a CuPy array or a number).

    >>> import minflux as mf, numpy as np
    >>> mf.to_numpy(3.0)
    array(3.)
    """
    x = unwrap(x)
    if is_cupy_array(x):
        return _cupy.asnumpy(x)
    return np.asarray(x)
