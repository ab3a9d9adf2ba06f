"""minflux: a small, fast deep-learning framework whose elementwise kernels differentiate in mixed mode.

>>> import minflux as mf, numpy as np
>>> mf.gradient(lambda x: mf.sum(x * x), np.array([1.0, 2.0]))
(array([2., 4.]),)
"""
from .tensor import Tensor  # first: the op modules it binds import the tape, which needs Tensor
from . import tree
from .autograd import gradient, no_grad, stop_gradient, withgradient
from .backend import (DeviceError, default_dtype, get_array_module, gpu_available, is_array,
                      set_default_dtype, to_device, to_numpy)
from .broadcast.node import sum_to
from .elementwise import (abs, add, clip, cos, divide, equal, exp, expm1, floor, floor_divide, greater,
                          greater_equal, less, less_equal, log, log1p, logical_and, logical_not,
                          logical_or, maximum, minimum, mod, multiply, negative, not_equal, power,
                          relu, sigmoid, sign, sin, softplus, sqrt, subtract, tanh, where)
from .ops import (broadcast_to, concatenate, cross_entropy, expand_dims, getitem, log_softmax, logsumexp,
                  matmul, max, mean, min, reshape, softmax, split, squeeze, stack, sum, swapaxes, take,
                  transpose, unstack)

__version__ = "0.1.0"

__all__ = [
    "DeviceError", "Tensor", "abs", "add", "clip", "cos", "default_dtype", "divide", "equal", "exp",
    "expm1", "floor", "floor_divide", "get_array_module", "getitem", "gpu_available", "gradient",
    "greater", "greater_equal", "is_array", "less", "less_equal", "log", "log1p", "logical_and",
    "logical_not", "logical_or", "matmul", "maximum", "mean", "minimum", "mod", "multiply",
    "negative", "no_grad", "not_equal", "power", "relu", "reshape", "set_default_dtype", "sigmoid",
    "sign", "sin", "softplus", "sqrt", "stop_gradient", "subtract", "sum", "sum_to", "tanh",
    "to_device", "to_numpy", "transpose", "tree", "where", "withgradient",
]
__all__ += ["broadcast_to", "concatenate", "cross_entropy", "expand_dims", "log_softmax", "logsumexp",
            "max", "min", "softmax", "split", "squeeze", "stack", "swapaxes", "take", "unstack"]

from .broadcast.api import (CompileError, broadcast, elementwise, get_elementwise_backend,  # noqa: E402
                            scalar_rule, set_elementwise_backend)

__all__ += ["CompileError", "broadcast", "elementwise", "get_elementwise_backend", "scalar_rule",
            "set_elementwise_backend"]

from . import nn, optim  # noqa: E402  (layers and optimisers build on everything above)
from .io import load, save  # noqa: E402

__all__ += ["load", "nn", "optim", "save"]

from .transfer_guard import HostTransferError, no_host_transfers  # noqa: E402

__all__ += ["HostTransferError", "no_host_transfers"]
