"""Embedding: a lookup table from integer ids to vectors."""
from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from ..backend import as_array, get_array_module
from ..ops import take
from ..ops._common import check_index_range

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
        ids = as_array(xp, ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{self._repr_head()} takes integer ids, got dtype {ids.dtype}; convert "
                            f"with ids.astype(np.int64)")
        if xp is np:
            check_index_range(ids, self.W.shape[0], functools.partial(_id_outside, self._repr_head(),
                                                                      self.W.shape[0]))
        return take(self.W, ids, axis=0)

    def _repr_head(self) -> str:
        return f"Embedding({self.W.shape[0]} => {self.W.shape[1]})"


def _id_outside(layer: str, vocab: int, low, high) -> IndexError:
    return IndexError(f"{layer} got id {low if low < 0 else high}, outside [0, {vocab})")
