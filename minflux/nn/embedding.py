"""Embedding: a lookup table from integer ids to vectors."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..backend import get_array_module
from ..ops import take

from . import init as initialisers
from ._checks import check_sizes, input_shape
from ._rng import as_generator
from .module import Module
from ..tensor import unwrap


class Embedding(Module):
    """Rows of ``W`` (shape ``(vocab_size, dim)``) picked by integer ids: ``ids.shape + (dim,)``.

    The gradient of a row picked several times is the sum over its uses. Ids must be integers in
    ``[0, vocab_size)``; on the host anything else is an error naming the offending value (ids on the
    GPU are not range-checked, since that would read them back to the host on every call).

    >>> import numpy as np, minflux as mf
    >>> emb = mf.nn.Embedding(10, 4, rng=np.random.default_rng(0))
    >>> emb(np.array([[1, 2, 2]])).shape
    (1, 3, 4)
    """

    def __init__(self, vocab_size: int, dim: int, *, rng, init: Callable = initialisers.normal,
                 dtype=None):
        check_sizes("Embedding", vocab_size=vocab_size, dim=dim)
        self.W = init(as_generator(rng, "Embedding"), vocab_size, dim, dtype=dtype)

    def __call__(self, ids):
        input_shape(self._repr_head(), ids, what="integer ids")
        ids = unwrap(ids)
        xp = get_array_module(ids, self.W, op="Embedding")
        ids = xp.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{self._repr_head()} takes integer ids, got dtype {ids.dtype}; convert "
                            f"with ids.astype(np.int64)")
        vocab = self.W.shape[0]
        if xp is np and ids.size and (int(ids.min()) < 0 or int(ids.max()) >= vocab):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise IndexError(f"{self._repr_head()} got id {bad}, outside [0, {vocab})")
        return take(self.W, ids, axis=0)

    def _repr_head(self) -> str:
        return f"Embedding({self.W.shape[0]} => {self.W.shape[1]})"
