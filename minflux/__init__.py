"""minflux: a small, fast deep-learning framework whose elementwise kernels differentiate in mixed mode.

>>> import minflux as mf, numpy as np
>>> mf.gradient(lambda x: mf.sum(x * x), np.array([1.0, 2.0]))
(array([2., 4.]),)
"""
from . import nn, optim, tree
from ._operators import install as _install_operators
from ._version import __version__
from .autograd import gradient, no_grad, stop_gradient, withgradient
from .backend import (DeviceError, default_dtype, get_array_module, gpu_available, is_array,
                      set_default_dtype, to_numpy)
from .compiler.compiled import get_elementwise_backend, set_elementwise_backend
from .compiler.errors import CompileError
from .device import to_device
from .io import load, save
from .ops import (broadcast_to, concatenate, cross_entropy, expand_dims, getitem, log_softmax, logsumexp,
                  matmul, max, mean, min, reshape, softmax, split, squeeze, stack, sum, swapaxes, take,
                  transpose, unstack)
from .ops.broadcasting import sum_to
from .pointwise.functions import broadcast, elementwise, scalar_rule
from .pointwise.primitives import (abs, acos, acosh, add, asin, asinh, atan, atan2, atanh, ceil, clip, cos,
                                   cosh, divide, equal, exp, expm1, floor, floor_divide, greater,
                                   greater_equal, hypot, less, less_equal, log, log1p, log2, log10,
                                   logical_and, logical_not, logical_or, maximum, minimum, mod, multiply,
                                   negative, not_equal, power, relu, sigmoid, sign, sin, sinh, softplus,
                                   sqrt, subtract, tan, tanh, trunc, where)
from .tensor import Tensor
from .transfer_guard import HostTransferError, no_host_transfers

_install_operators(Tensor)

__all__ = [
    "CompileError", "DeviceError", "HostTransferError", "Tensor", "__version__", "abs", "acos", "acosh",
    "add", "asin", "asinh", "atan", "atan2", "atanh", "broadcast", "broadcast_to", "ceil", "clip",
    "concatenate", "cos", "cosh", "cross_entropy", "default_dtype", "divide", "elementwise", "equal",
    "exp", "expand_dims", "expm1", "floor", "floor_divide", "get_array_module",
    "get_elementwise_backend", "getitem", "gpu_available", "gradient", "greater", "greater_equal",
    "hypot", "is_array", "less", "less_equal", "load", "log", "log10", "log1p", "log2", "log_softmax",
    "logical_and", "logical_not", "logical_or", "logsumexp", "matmul", "max", "maximum", "mean", "min",
    "minimum", "mod", "multiply", "negative", "nn", "no_grad", "no_host_transfers", "not_equal", "optim",
    "power", "relu", "reshape", "save", "scalar_rule", "set_default_dtype", "set_elementwise_backend",
    "sigmoid", "sign", "sin", "sinh", "softmax", "softplus", "split", "sqrt", "squeeze", "stack",
    "stop_gradient", "subtract", "sum", "sum_to", "swapaxes", "take", "tan", "tanh", "to_device",
    "to_numpy", "transpose", "tree", "trunc", "unstack", "where", "withgradient",
]
