"""DLPack interop: arrays from PyTorch, JAX or CuPy without a copy, and minflux arrays and Tensors
readable by them (``torch.from_dlpack(t)``, ``jax.dlpack.from_dlpack(t)``).

minflux's arrays are numpy and CuPy arrays, which speak DLPack themselves; this module adds
`from_dlpack`, which picks numpy or CuPy by the producer's device, and gives `Tensor` the two
protocol methods (delegating to its value). Only values cross: no gradient flows through DLPack.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .backend import DeviceError, cupy_module
from .tensor import Tensor

_CPU, _CUDA, _CUDA_HOST, _CUDA_MANAGED = 1, 2, 3, 13


def from_dlpack(x: Any):
    """An array sharing memory with ``x``, any object with ``__dlpack__`` (a torch tensor, a JAX
    array, a CuPy array): numpy for host memory, CuPy for CUDA memory.

    Writes through one are seen by the other. No copy is made; a producer on another kind of device
    (ROCm, Metal, ...) is an error naming it.

    >>> import minflux as mf, numpy as np
    >>> source = np.arange(3.0)
    >>> view = mf.from_dlpack(source)
    >>> view[0] = 7.0
    >>> source
    array([7., 1., 2.])
    """
    if isinstance(x, Tensor):
        x = x.value
    if not hasattr(x, "__dlpack__") or not hasattr(x, "__dlpack_device__"):
        raise TypeError(f"mf.from_dlpack needs an object with __dlpack__ and __dlpack_device__ (a torch "
                        f"tensor, JAX array or CuPy array), got {type(x).__name__}")
    device_type, device_id = (int(v) for v in x.__dlpack_device__())
    if device_type in (_CPU, _CUDA_HOST):
        return np.from_dlpack(x)
    if device_type in (_CUDA, _CUDA_MANAGED):
        cupy = cupy_module()
        if cupy is None:
            raise DeviceError(f"mf.from_dlpack: the array lives on CUDA device {device_id}, which needs "
                              f"CuPy (pip install 'minflux[gpu]'); or move it to the host first")
        return cupy.from_dlpack(x)
    raise DeviceError(f"mf.from_dlpack: DLPack device type {device_type} (device {device_id}) is neither "
                      f"the CPU nor CUDA; minflux arrays are numpy or CuPy arrays")


def _tensor_dlpack(self, *args, **kwargs):
    """The value's DLPack capsule (the value only: no gradient crosses)."""
    return self.value.__dlpack__(*args, **kwargs)


def _tensor_dlpack_device(self):
    """The value's DLPack device ``(type, id)``."""
    return self.value.__dlpack_device__()


Tensor.__dlpack__ = _tensor_dlpack
Tensor.__dlpack_device__ = _tensor_dlpack_device
