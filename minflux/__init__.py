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
from .compiled import CompiledStep, ReplayMismatch, compile
from .runtime import SettingError
from .schedule import NotReplayable, operation
from .compiler import CompileError, get_elementwise_backend, set_elementwise_backend
from .runtime.threads import get_num_threads, set_num_threads
from .compiler import LoopLimitError, get_max_loop_iterations, set_max_loop_iterations
from .device import to_device
from .dlpack import from_dlpack
from .io import load, save
from .ops import (all, any, arange, astype, argmax, argmin, binary_cross_entropy_with_logits, broadcast_to,
                  concatenate, cross_entropy, cumsum, dot, einsum, expand_dims, flatten, flip, full,
                  full_like, getitem, index_set, isfinite, isnan, kl_divergence, layer_norm, log_softmax,
                  logsumexp, matmul, max, mean, min, moveaxis, mse, nll, norm, one_hot, ones, ones_like,
                  outer, pad, prod, repeat, reshape, roll, round, row_masked_matmul, softmax, split, squeeze, stack, std, sum,
                  swapaxes, take, take_along_axis, tensordot, tile, transpose, unstack, var, zeros,
                  zeros_like)
from .broadcasting import sum_to
from .pointwise.activations import elu, gelu, leaky_relu, log_sigmoid, logaddexp, rsqrt, silu, square
from .pointwise.functions import broadcast, elementwise, scalar_rule
from .pointwise.lazy import fusion, fusion_stats, set_fusion
from .pointwise.primitives import (abs, acos, acosh, add, asin, asinh, atan, atan2, atanh, ceil, clip, cos,
                                   cosh, define_primitive, divide, equal, erf, exp, expm1, floor, floor_divide, greater,
                                   greater_equal, hypot, less, less_equal, log, log1p, log2, log10,
                                   logical_and, logical_not, logical_or, maximum, minimum, mod, multiply,
                                   negative, not_equal, power, relu, sigmoid, sign, sin, sinh, softplus,
                                   sqrt, subtract, tan, tanh, trunc, where)
from .tensor import Tensor
from .transfer_guard import HostTransferError, no_host_transfers

_install_operators(Tensor)

__all__ = [
    "__version__", "abs", "acos", "acosh", "add", "all", "any", "arange", "argmax", "argmin", "asin",
    "asinh", "astype", "atan", "atan2", "atanh", "binary_cross_entropy_with_logits", "broadcast",
    "broadcast_to", "ceil", "clip", "compile", "CompiledStep", "CompileError", "concatenate", "cos", "cosh", "cross_entropy",
    "cumsum", "default_dtype", "DeviceError", "divide", "dot", "einsum", "elementwise", "elu", "equal",
    "erf", "exp", "expand_dims", "expm1", "flatten", "flip", "floor", "floor_divide", "from_dlpack",
    "full", "full_like", "fusion", "fusion_stats", "gelu", "get_array_module",
    "define_primitive", "get_elementwise_backend", "get_max_loop_iterations", "get_num_threads", "getitem", "gpu_available",
    "gradient", "greater", "greater_equal", "HostTransferError", "hypot", "is_array", "isfinite",
    "index_set", "isnan", "kl_divergence", "layer_norm", "leaky_relu", "less", "less_equal", "load", "log", "log10", "log1p",
    "log2", "log_sigmoid", "log_softmax", "logaddexp", "logical_and", "logical_not", "logical_or",
    "logsumexp", "LoopLimitError", "matmul", "max", "maximum", "mean", "min", "minimum", "mod",
    "moveaxis", "mse", "multiply", "negative", "nll", "nn", "no_grad", "no_host_transfers", "norm",
    "not_equal", "NotReplayable", "one_hot", "operation", "ones", "ones_like", "optim", "outer", "pad", "power", "prod", "relu",
    "repeat", "ReplayMismatch", "reshape", "row_masked_matmul", "roll", "round", "rsqrt", "save", "scalar_rule", "set_default_dtype",
    "set_elementwise_backend", "set_fusion", "SettingError", "set_max_loop_iterations", "set_num_threads", "sigmoid",
    "sign", "silu", "sin", "sinh", "softmax", "softplus", "split", "sqrt", "square", "squeeze", "stack",
    "std", "stop_gradient", "subtract", "sum", "sum_to", "swapaxes", "take", "take_along_axis", "tan",
    "tanh", "Tensor", "tensordot", "tile", "to_device", "to_numpy", "transpose", "tree", "trunc",
    "unstack", "var", "where", "withgradient", "zeros", "zeros_like",
]
