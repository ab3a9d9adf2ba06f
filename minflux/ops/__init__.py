"""Structural ops with hand-written VJPs: reductions, shapes, indexing, matmul, softmax and losses.

Every op accepts arrays, Tensors and Python numbers; outside `mf.gradient` it returns plain arrays.
VJP closures capture arrays, never Tensors.

>>> from minflux import ops
>>> import numpy as np
>>> ops.sum(ops.matmul(np.ones((2, 3)), np.ones(3)))
np.float64(6.0)
"""
from .indexing import getitem, take
from .linalg import matmul
from .losses import cross_entropy, log_softmax, softmax
from .reductions import logsumexp, max, mean, min, sum
from .shapes import (broadcast_to, concatenate, expand_dims, reshape, split, squeeze, stack, swapaxes,
                     transpose, unstack)

__all__ = ["broadcast_to", "concatenate", "cross_entropy", "expand_dims", "getitem", "log_softmax",
           "logsumexp", "matmul", "max", "mean", "min", "reshape", "softmax", "split", "squeeze",
           "stack", "sum", "swapaxes", "take", "transpose", "unstack"]
