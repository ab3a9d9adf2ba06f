"""A weight gradient ``a.T @ g`` kept as its two factors until it is needed.

A recurrent model multiplies the same weight at every time step, so the backward pass produces one
gradient ``h_t.T @ g_t`` per step (``K = batch`` rows each) and adds each into a full-size buffer.
Kept as factors, the steps' contributions are stacked and formed as one matrix product with
``K = steps x batch`` rows: the same arithmetic in one well-shaped GEMM instead of ``T`` thin ones, and
no ``T`` passes over the weight-sized buffer. Pending factors are bounded (`FLUSH_BYTES`), so holding
them costs at most a few chunks of activations.
"""
from __future__ import annotations

from .backend import get_array_module
from .matrix_product import matmul

FLUSH_BYTES = 32 * 2**20
"""Pending factor bytes after which the stacked product is formed and the factors released."""


class ProductGradient:
    """The sum over pieces ``k`` of ``lefts[k].T @ rights[k]`` (each piece ``(K_k, M)`` and ``(K_k, N)``).

    >>> import numpy as np
    >>> a, g = np.ones((2, 3)), np.ones((2, 4))
    >>> p = ProductGradient(a, g)
    >>> p.add(ProductGradient(a, 2 * g))
    >>> p.dense()[0]
    array([6., 6., 6., 6.])
    """

    __slots__ = ("lefts", "rights", "pending_bytes", "partial")

    def __init__(self, left, right):
        self.lefts, self.rights = [left], [right]
        self.pending_bytes = left.nbytes + right.nbytes
        self.partial = None

    @property
    def shape(self) -> tuple:
        return (self.lefts[0].shape[1], self.rights[0].shape[1])

    def add(self, other: "ProductGradient") -> None:
        """Add ``other``'s pieces to this sum (forming the stacked product past `FLUSH_BYTES`)."""
        self.lefts.extend(other.lefts)
        self.rights.extend(other.rights)
        self.pending_bytes += other.pending_bytes
        if other.partial is not None:
            self.partial = other.partial if self.partial is None else self.partial + other.partial
        if self.pending_bytes > FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        product = _stacked_product(self.lefts, self.rights)
        self.lefts, self.rights, self.pending_bytes = [], [], 0
        if self.partial is None:
            self.partial = product
        else:
            self.partial += product

    def dense(self):
        """The sum as one array (a fresh one, safe to update in place)."""
        if self.lefts:
            self._flush()
        return self.partial


def _stacked_product(lefts: list, rights: list):
    if len(lefts) == 1:
        return matmul(lefts[0].T, rights[0])
    xp = get_array_module(lefts[0])
    return matmul(xp.concatenate(lefts).T, xp.concatenate(rights))
