"""Structural ops with hand-written VJPs: reductions, shapes, indexing, matmul, softmax and losses.

Every op accepts arrays, Tensors and Python numbers; outside `mf.gradient` it returns plain arrays.
VJP closures capture arrays, never Tensors.

>>> from minflux import ops
>>> import numpy as np
>>> ops.sum(ops.matmul(np.ones((2, 3)), np.ones(3)))
np.float64(6.0)
"""
from .constructors import arange, full, full_like, one_hot, ones, ones_like, zeros, zeros_like
from .contractions import dot, einsum, outer, tensordot
from .discrete import all, any, isfinite, isnan, round
from .casting import astype
from .indexing import getitem, index_set, take, take_along_axis
from .linalg import matmul
from .losses import (binary_cross_entropy_with_logits, cross_entropy, kl_divergence, log_softmax, mse,
                     nll, softmax)
from .normalisation import layer_norm
from .norms import norm
from .row_masking import row_masked_matmul
from .rearrange import flatten, flip, moveaxis, pad, repeat, roll, tile
from .reductions import logsumexp, max, mean, min, sum
from .shapes import (broadcast_to, concatenate, expand_dims, reshape, split, squeeze, stack, swapaxes,
                     transpose, unstack)
from .statistics import argmax, argmin, cumsum, prod, std, var

__all__ = ["astype", "broadcast_to", "concatenate", "cross_entropy", "expand_dims", "getitem", "log_softmax",
           "logsumexp", "matmul", "max", "mean", "min", "reshape", "softmax", "split", "squeeze",
           "stack", "sum", "swapaxes", "take", "transpose", "unstack"]
__all__ += ["all", "any", "arange", "argmax", "argmin", "binary_cross_entropy_with_logits", "cumsum", "dot", "einsum", "flatten", "flip", "full", "full_like", "index_set", "isfinite", "isnan",
            "kl_divergence", "layer_norm", "moveaxis", "mse", "nll", "norm", "one_hot", "ones", "ones_like", "outer", "row_masked_matmul",
            "pad", "prod", "repeat", "roll", "round", "std", "take_along_axis", "tensordot", "tile",
            "var", "zeros", "zeros_like"]
