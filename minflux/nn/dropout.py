"""Dropout: zero each element with probability ``p`` while training, scale the rest by 1/(1-p)."""
from __future__ import annotations

import numpy as np

from ..backend import as_array, get_array_module
from ..autograd import active_tape

from ._rng import as_generator
from .module import Module
from ..tensor import unwrap


class Dropout(Module):
    """Inverted dropout (Srivastava et al. 2014) with an explicit random generator.

    By default (``active=None``) it is active only inside a gradient computation (while `mf.gradient`
    records) and is the identity elsewhere, so evaluation code needs no mode switch; ``active=True``
    or ``False`` overrides that, and `mf.nn.testmode` / `mf.nn.trainmode` set it for a whole model
    (a gradient taken at test time, such as a saliency map, needs ``testmode``). Masks are drawn
    from ``rng`` (a ``numpy.random.Generator``) on the host for numpy arrays; for CuPy arrays a seed
    drawn from ``rng`` seeds CuPy's generator so the mask is made on the device, and runs stay
    reproducible from the one host generator.

    >>> import numpy as np, minflux as mf
    >>> drop = mf.nn.Dropout(0.5, rng=np.random.default_rng(0))
    >>> x = np.ones(4, np.float32)
    >>> drop(x)                                       # outside a gradient: identity
    array([1., 1., 1., 1.], dtype=float32)
    >>> mf.nn.Dropout(0.5, rng=np.random.default_rng(0), active=True)(x)
    array([2., 0., 0., 0.], dtype=float32)
    """

    def __init__(self, p: float, *, rng, active: bool | None = None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout probability p must be in [0, 1), got {p}")
        self.p = float(p)
        self.rng = as_generator(rng, "Dropout")
        self.active = active

    def is_active(self) -> bool:
        """Whether a call would drop elements now (``active``, or else whether a tape records)."""
        return active_tape() is not None if self.active is None else bool(self.active)

    def mask(self, shape: tuple, dtype, xp=np):
        """The scaled keep-mask: 0 with probability ``p``, else ``1 / (1 - p)``."""
        if xp is np:
            keep = self.rng.random(shape) >= self.p
        else:
            seed = int(self.rng.integers(2**63))
            keep = xp.random.default_rng(seed).random(shape) >= self.p
        return keep.astype(dtype) * as_array(xp, 1.0 / (1.0 - self.p), dtype=dtype)

    def __call__(self, x):
        if self.p == 0.0 or not self.is_active():
            return x
        value = unwrap(x)
        xp = get_array_module(value, op="Dropout")
        return x * self.mask(value.shape, value.dtype, xp)

    def _repr_head(self) -> str:
        mode = "" if self.active is None else f", active={self.active}"
        return f"Dropout({self.p}{mode})"
