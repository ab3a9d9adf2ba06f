"""Initialisers: functions ``init(rng, *shape, dtype=None)`` that return a new numpy array.

Every initialiser takes an explicit ``numpy.random.Generator`` (``zeros`` and ``ones`` accept and
ignore one, so all of them fit a layer's ``init=`` argument). Matrices follow the layers' convention
``y = x @ W``: ``shape[0]`` is the fan-in and ``shape[1]`` the fan-out; for more dimensions the
trailing ones are receptive-field sizes, as in Glorot and Bengio (2010). Arrays are created on the
host in ``dtype`` (``mf.default_dtype()`` when None); move a model with ``mf.to_device``.
"""
from __future__ import annotations

import math

import numpy as np

from ..backend import default_dtype
from ..schedule.traced import TracedGenerator

__all__ = ["fan_in_out", "glorot_normal", "glorot_uniform", "normal", "ones", "orthogonal", "uniform",
           "xavier_normal", "xavier_uniform", "zeros"]


def _check(rng, shape, name):
    if not isinstance(rng, (np.random.Generator, TracedGenerator)):   # a recording's stand-in draws as it
        raise TypeError(f"mf.nn.init.{name} needs a numpy.random.Generator as its first argument, got "
                        f"{type(rng).__name__}; pass e.g. np.random.default_rng(0)")
    if any(not isinstance(n, (int, np.integer)) or n < 0 for n in shape):
        raise ValueError(f"mf.nn.init.{name}: shape must be non-negative integers, got {shape}")


def _dtype(dtype):
    return default_dtype() if dtype is None else np.dtype(dtype)


def fan_in_out(shape: tuple) -> tuple[int, int]:
    """``(fan_in, fan_out)`` of a weight of ``shape`` under the ``y = x @ W`` convention.

    >>> from minflux.nn import init
    >>> init.fan_in_out((3, 5)), init.fan_in_out((7,))
    ((3, 5), (7, 7))
    """
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    field = math.prod(shape[2:])
    return shape[0] * field, shape[1] * field


def uniform(rng: np.random.Generator, *shape: int, low: float = -0.05, high: float = 0.05,
            dtype=None) -> np.ndarray:
    """Uniform on ``[low, high)``.

    >>> import numpy as np
    >>> from minflux.nn import init
    >>> w = init.uniform(np.random.default_rng(0), 2, 3, low=0.0, high=1.0)
    >>> w.shape, w.dtype, bool(((0 <= w) & (w < 1)).all())
    ((2, 3), dtype('float32'), True)
    """
    _check(rng, shape, "uniform")
    return rng.uniform(low, high, size=shape).astype(_dtype(dtype))


def normal(rng: np.random.Generator, *shape: int, mean: float = 0.0, std: float = 1.0,
           dtype=None) -> np.ndarray:
    """Normal with the given ``mean`` and ``std``.

    >>> import numpy as np
    >>> from minflux.nn import init
    >>> init.normal(np.random.default_rng(0), 1000, std=0.1, dtype=np.float64).std().round(1)
    np.float64(0.1)
    """
    _check(rng, shape, "normal")
    return (mean + std * rng.standard_normal(size=shape)).astype(_dtype(dtype))


def glorot_uniform(rng: np.random.Generator, *shape: int, gain: float = 1.0, dtype=None) -> np.ndarray:
    """Glorot (Xavier) uniform: ``U(-a, a)`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``.

    >>> import numpy as np
    >>> from minflux.nn import init
    >>> w = init.glorot_uniform(np.random.default_rng(0), 4, 2)
    >>> bool(np.abs(w).max() <= 1.0)        # sqrt(6 / 6) = 1
    True
    """
    _check(rng, shape, "glorot_uniform")
    fan_in, fan_out = fan_in_out(shape)
    bound = gain * math.sqrt(6.0 / max(fan_in + fan_out, 1))
    return rng.uniform(-bound, bound, size=shape).astype(_dtype(dtype))


def glorot_normal(rng: np.random.Generator, *shape: int, gain: float = 1.0, dtype=None) -> np.ndarray:
    """Glorot (Xavier) normal: ``N(0, s^2)`` with ``s = gain * sqrt(2 / (fan_in + fan_out))``.

    >>> import numpy as np
    >>> from minflux.nn import init
    >>> init.glorot_normal(np.random.default_rng(0), 500, 500, dtype=np.float64).std().round(3)
    np.float64(0.045)
    """
    _check(rng, shape, "glorot_normal")
    fan_in, fan_out = fan_in_out(shape)
    std = gain * math.sqrt(2.0 / max(fan_in + fan_out, 1))
    return (std * rng.standard_normal(size=shape)).astype(_dtype(dtype))


xavier_uniform = glorot_uniform
xavier_normal = glorot_normal


def orthogonal(rng: np.random.Generator, *shape: int, gain: float = 1.0, dtype=None) -> np.ndarray:
    """A (semi-)orthogonal matrix times ``gain`` (Saxe et al. 2014); extra axes are flattened into rows.

    Rows are orthonormal when ``rows <= cols``, columns otherwise.

    >>> import numpy as np
    >>> from minflux.nn import init
    >>> q = init.orthogonal(np.random.default_rng(0), 3, 3, dtype=np.float64)
    >>> np.allclose(q @ q.T, np.eye(3))
    True
    """
    _check(rng, shape, "orthogonal")
    if len(shape) < 2:
        raise ValueError(f"mf.nn.init.orthogonal needs at least 2 dimensions, got shape {shape}")
    rows, cols = math.prod(shape[:-1]), shape[-1]
    a = rng.standard_normal(size=(max(rows, cols), min(rows, cols)))
    q, r = np.linalg.qr(a)
    q = q * np.sign(np.diag(r))  # makes the distribution uniform (Haar)
    if rows < cols:
        q = q.T
    return (gain * q).reshape(shape).astype(_dtype(dtype))


def zeros(rng: np.random.Generator | None, *shape: int, dtype=None) -> np.ndarray:
    """All zeros (``rng`` is accepted for a uniform signature and ignored; None is fine).

    >>> from minflux.nn import init
    >>> init.zeros(None, 2)
    array([0., 0.], dtype=float32)
    """
    return np.zeros(shape, dtype=_dtype(dtype))


def ones(rng: np.random.Generator | None, *shape: int, dtype=None) -> np.ndarray:
    """All ones (``rng`` is accepted for a uniform signature and ignored; None is fine).

    >>> from minflux.nn import init
    >>> init.ones(None, 2)
    array([1., 1.], dtype=float32)
    """
    return np.ones(shape, dtype=_dtype(dtype))
