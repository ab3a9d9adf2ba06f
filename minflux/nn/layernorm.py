"""LayerNorm: normalise the last axis to zero mean and unit variance, then scale and shift."""
from __future__ import annotations

from ..ops.normalisation import layer_norm

from . import init as initialisers
from ._checks import check_sizes, input_shape
from .module import Module


class LayerNorm(Module):
    """Layer normalisation (Ba et al. 2016) over the last axis, with learnt ``scale`` and ``shift``.

    ``y = (x - mean) / sqrt(var + eps) * scale + shift`` where mean and (biased) variance are taken
    over the last axis; ``affine=False`` keeps ``scale = 1`` and ``shift = 0`` fixed (no parameters).

    >>> import numpy as np, minflux as mf
    >>> norm = mf.nn.LayerNorm(4)
    >>> y = norm(np.array([[1.0, 2.0, 3.0, 4.0]], np.float32))
    >>> np.round(y, 3)
    array([[-1.342, -0.447,  0.447,  1.342]], dtype=float32)
    """

    def __init__(self, dim: int, eps: float = 1e-5, affine: bool = True, dtype=None):
        check_sizes("LayerNorm", dim=dim)
        self.eps = float(eps)
        self.scale = initialisers.ones(None, dim, dtype=dtype) if affine else None
        self.shift = initialisers.zeros(None, dim, dtype=dtype) if affine else None
        self.dim = dim

    def __call__(self, x):
        input_shape(self._repr_head(), x, self.dim)
        return layer_norm(x, self.scale, self.shift, self.eps)

    def _repr_head(self) -> str:
        extra = "" if self.scale is not None else ", affine=False"
        return f"LayerNorm({self.dim}{extra})"
