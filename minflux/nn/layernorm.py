"""LayerNorm: normalise the last axis to zero mean and unit variance, then scale and shift."""
from __future__ import annotations

from ..ops import mean
from ..pointwise.functions import elementwise
from ..pointwise.primitives import sqrt

from . import init as initialisers
from .module import Module


@elementwise
def normalise_affine(centred, var, eps, scale, shift):
    """``centred / sqrt(var + eps) * scale + shift`` for one element."""
    return centred / sqrt(var + eps) * scale + shift


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
        self.eps = float(eps)
        self.scale = initialisers.ones(None, dim, dtype=dtype) if affine else None
        self.shift = initialisers.zeros(None, dim, dtype=dtype) if affine else None
        self.dim = dim

    def __call__(self, x):
        centred = x - mean(x, axis=-1, keepdims=True)
        var = mean(centred * centred, axis=-1, keepdims=True)
        if self.scale is None:
            return normalise_affine(centred, var, self.eps, 1.0, 0.0)
        return normalise_affine(centred, var, self.eps, self.scale, self.shift)

    def _repr_head(self) -> str:
        extra = "" if self.scale is not None else ", affine=False"
        return f"LayerNorm({self.dim}{extra})"
