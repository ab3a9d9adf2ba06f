"""Devices: ``"cpu"``, ``"gpu"`` or ``"auto"``, and moving arrays and whole trees between them.

>>> import minflux as mf, numpy as np
>>> mf.to_device([np.ones(1)], "cpu")
[array([1.])]
"""
from __future__ import annotations

import warnings
from typing import Any

from .backend import DeviceError, cupy_module, gpu_available, is_cupy_array
from .tree import map_arrays


def resolve_device(device: str, warn: bool = True) -> str:
    """Turn ``"cpu" | "gpu" | "auto"`` into ``"cpu"`` or ``"gpu"``; ``"gpu"`` without a GPU is an error.

    ``"auto"`` without a GPU falls back to the CPU with a RuntimeWarning saying why (unless ``warn``
    is False: a caller that reports the device it chose itself).

    >>> resolve_device("cpu")
    'cpu'
    """
    if device not in ("cpu", "gpu", "auto"):
        raise ValueError(f'device must be "cpu", "gpu" or "auto", got {device!r}')
    if device == "cpu":
        return "cpu"
    if gpu_available():
        return "gpu"
    why = "CuPy is not installed (pip install 'minflux[gpu]')" if cupy_module() is None else "CuPy sees no CUDA device"
    if device == "gpu":
        raise DeviceError(f'device "gpu" was requested but {why}; use device "cpu" or "auto"')
    if warn:
        warnings.warn(f'device "auto" falls back to the CPU: {why}', RuntimeWarning, stacklevel=3)
    return "cpu"


def move_array(x, device: str):
    """Move one array to ``"cpu"`` or ``"gpu"`` (no copy when it is already there).

    >>> import numpy as np
    >>> move_array(np.ones(1), "cpu")
    array([1.])
    """
    if device == "cpu":
        return cupy_module().asnumpy(x) if is_cupy_array(x) else x
    return x if is_cupy_array(x) else cupy_module().asarray(x)


def to_device(tree: Any, device: str = "auto"):
    """Move every array in ``tree`` (an array, model, optimiser state or batch) to a device.

    ``device`` is ``"cpu"``, ``"gpu"`` or ``"auto"`` (GPU when available, else CPU with one warning).
    Returns the moved tree; objects are shallow-copied, tied arrays stay tied.

    >>> import minflux as mf, numpy as np
    >>> mf.to_device({"W": np.ones(2)}, "cpu")["W"]
    array([1., 1.])
    """
    resolved = resolve_device(device)
    return map_arrays(lambda a: move_array(a, resolved), tree, trainable_only=False)
