"""Tensor's operators, conversions and array methods, installed once by the package's ``__init__``.

`minflux.tensor` defines the data type alone and imports nothing else of minflux; the ops Tensor's
operators call live above it, so they are assigned here (the pattern of Chainer's
``install_variable_arithmetics``).

>>> import minflux as mf, numpy as np
>>> t = mf.Tensor(np.array([1.0, -2.0]))
>>> (abs(t) @ t).value, np.asarray(t * 2)
(np.float64(-3.0), array([ 2., -4.]))
"""
from __future__ import annotations

import sys

import numpy as np

from ._call_site import UNKNOWN, called_function
from .autograd import active_tape
from .backend import to_numpy
from . import ops
from .ops import getitem, matmul, max, mean, min, reshape, sum, transpose, unstack
from .pointwise import activations
from .pointwise import primitives as pw
from .tensor import Tensor


def _binary(op):
    return lambda self, other: op(self, other), lambda self, other: op(other, self)


def _recording(t) -> bool:
    """True when ``t`` is tracked by the gradient computation that is recording right now."""
    return isinstance(t, Tensor) and t._tape is not None and t._tape is active_tape()


def _caller() -> str:
    """``file:line`` of the innermost frame outside numpy and this module (where the user called)."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_globals.get("__name__", "").startswith("numpy")
                                 or frame.f_code.co_filename == __file__):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "<unknown>"


def _lost_gradient(operation: str, instead: str, carrier: str = "numpy") -> TypeError:
    return TypeError(
        f"{operation} was applied at {_caller()} to a Tensor that mf.gradient is tracking; {carrier} "
        f"cannot carry gradients, so this one would be silently lost. {instead} If the value is meant "
        f"to be a constant, say so with mf.stop_gradient(t) first.")


_MATH_ALTERNATIVES = {"fabs": "abs", "pow": "power", "fsum": "sum", "fmod": "mod"}
_READ = ("To read the value as a number for control flow or logging (which drops the gradient, as "
         "mf.stop_gradient does), write float(t) or t.item().")


def _float(self):
    """``float(t)``: the value as a Python float, a read that drops the gradient.

    Every other path to ``__float__`` on a tracked Tensor (``math.exp(t)``, ``np.float64(t)``,
    ``"%f" % t``) is an error: its result would enter the loss as a constant without a word.
    """
    if _recording(self):
        function = called_function(sys._getframe(1))
        if function is not float:
            raise _float_conversion_error(function)
    return float(self.value)


def _float_conversion_error(function) -> TypeError:
    module = getattr(function, "__module__", None)
    name = getattr(function, "__name__", None)
    if module in ("math", "cmath") and name:
        alternative = _MATH_ALTERNATIVES.get(name, name)
        known = hasattr(ops, alternative) or hasattr(pw, alternative)
        instead = f"Use mf.{alternative} instead. " if known else "Use minflux ops on the Tensor. "
        return _lost_gradient(f"{module}.{name}", instead + _READ, carrier="the math module")
    if isinstance(function, type) and issubclass(function, np.generic):
        return _lost_gradient(f"np.{name}", f"Use mf.astype(t, np.{name}) instead. " + _READ)
    what = (f"a conversion to a Python float inside {name}(...)" if function is not UNKNOWN and name
            else "a conversion to a Python float (math.*, '%f' formatting, a numpy scalar type)")
    return _lost_gradient(what, "Use minflux ops on the Tensor. " + _READ, carrier="a Python float")


def _array(self, dtype=None, copy=None):
    if _recording(self):
        function = called_function(sys._getframe(1))  # np.float64(t) lands here once __float__ refused
        if isinstance(function, type) and issubclass(function, np.generic):
            raise _float_conversion_error(function)
        raise _lost_gradient("a conversion to a numpy array (np.asarray, np.array, a numpy function)",
                             "Use minflux ops on the Tensor (mf.sum, mf.concatenate, mf.einsum, ...).")
    out = to_numpy(self.value)
    return out if dtype is None else out.astype(dtype, copy=False)


def _numpy(self):
    """The value as a numpy array (copied from the GPU when needed); an error on a tracked Tensor."""
    if _recording(self):
        raise _lost_gradient("Tensor.numpy()", "Use minflux ops on the Tensor.")
    return _array(self)


# numpy functions that read only shapes and dtypes: harmless on a tracked Tensor
_METADATA = {"shape", "ndim", "size", "result_type", "iscomplexobj", "isrealobj", "may_share_memory",
             "shares_memory", "min_scalar_type", "can_cast"}


def _unwrap_all(x):
    if isinstance(x, Tensor):
        return x.value
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap_all(v) for v in x)
    return x


def _any_recording(x) -> bool:
    if isinstance(x, (list, tuple)):
        return any(_any_recording(v) for v in x)
    return _recording(x)


def _array_function(self, func, types, args, kwargs):
    """numpy functions on Tensors: the values outside `mf.gradient`, an error on tracked Tensors.

    Inside a gradient computation a numpy function would compute on the value and lose the
    gradient without a word; the error names the minflux function to use instead.
    """
    name = func.__name__
    if name not in _METADATA and (_any_recording(args) or _any_recording(tuple(kwargs.values()))):
        module = func.__module__ or "numpy"
        qualified = ("np." + module[len("numpy."):] + "." if module.startswith("numpy.") and
                     not module.startswith("numpy._") else "np.") + name
        alternative = {"norm": "norm", "concat": "concatenate", "vstack": "concatenate",
                       "hstack": "concatenate"}.get(name, name)
        known = hasattr(ops, alternative) or hasattr(pw, alternative)
        instead = (f"Use mf.{alternative} instead." if known else
                   "Use minflux ops on the Tensor (see mf.__all__).")
        raise _lost_gradient(qualified, instead)
    return func(*_unwrap_all(args), **{k: _unwrap_all(v) for k, v in kwargs.items()})


_UFUNC_ALTERNATIVES = {"absolute": "abs", "true_divide": "divide", "remainder": "mod", "fmod": "mod",
                       "arcsin": "asin", "arccos": "acos", "arctan": "atan", "arctan2": "atan2",
                       "arcsinh": "asinh", "arccosh": "acosh", "arctanh": "atanh", "isfinite": "isfinite"}


class _UfuncOverride:
    """``Tensor.__array_ufunc__``: None, so that numpy and CuPy hand an operator (``array + t``) to the
    Tensor's reflected method, except while the calling frame is calling a numpy ufunc by name
    (``np.tanh(t)``), which gets `_array_ufunc`: numpy's own refusal could not name the minflux
    function to use instead."""

    def __get__(self, obj, owner=None):
        return _array_ufunc if isinstance(called_function(sys._getframe(1)), np.ufunc) else None


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """A numpy ufunc called on Tensors: an error naming the minflux function when one is tracked, the
    ufunc on the values otherwise (as numpy functions are, through ``__array_function__``)."""
    out = kwargs.get("out", ())
    if any(isinstance(o, Tensor) for o in (out if isinstance(out, tuple) else (out,))):
        raise TypeError(f"np.{ufunc.__name__}(..., out=t): Tensors are immutable; use the result instead")
    if _any_recording(inputs):
        name = _UFUNC_ALTERNATIVES.get(ufunc.__name__, ufunc.__name__)
        known = hasattr(ops, name) or hasattr(pw, name) or hasattr(activations, name)
        raise _lost_gradient(f"np.{ufunc.__name__}", f"Use mf.{name} instead." if known else
                             "Use minflux ops on the Tensor (see mf.__all__).")
    return getattr(ufunc, method)(*_unwrap_all(inputs), **kwargs)


def _iter(self):
    """Iterate over the first axis through one `mf.unstack` node (not one slice node per item)."""
    if self.ndim == 0:
        raise TypeError("iteration over a 0-d Tensor")
    return iter(unstack(self))


def _transposed(self):
    """The transpose (all axes reversed)."""
    return transpose(self)


def _reshape(self, *shape):
    """``mf.reshape(self, shape)``; accepts ``t.reshape(2, 3)`` and ``t.reshape((2, 3))``."""
    return reshape(self, shape[0] if len(shape) == 1 else shape)


def _transpose(self, *axes):
    """``mf.transpose(self, axes)``; accepts ``t.transpose(1, 0)`` and ``t.transpose((1, 0))``."""
    return transpose(self, (axes[0] if len(axes) == 1 else axes) if axes else None)


def _reduction(op):
    def method(self, axis=None, keepdims=False):
        return op(self, axis=axis, keepdims=keepdims)
    method.__name__ = op.__name__
    method.__doc__ = f"``mf.{op.__name__}(self, axis, keepdims)``."
    return method


def _logical(op, symbol: str):
    """``&``, ``|`` (and their reflections) on boolean Tensors: numpy's logical meaning, for masks."""
    def apply(a, b):
        for v in (a, b):
            dtype = getattr(v, "dtype", None)
            if dtype is not None and np.dtype(dtype).kind != "b" or isinstance(v, (int, float)) and \
                    not isinstance(v, bool):
                raise TypeError(f"`{symbol}` on Tensors is logical and needs boolean operands, got {dtype or type(v).__name__}; "
                                f"compare first (e.g. (x > 0) {symbol} (y > 0)), or use mf.where for arithmetic")
        return op(a, b)
    return lambda self, other: apply(self, other), lambda self, other: apply(other, self)


def _invert(self):
    """``~t``: logical not of a boolean Tensor."""
    if np.dtype(self.dtype).kind != "b":
        raise TypeError(f"`~` on Tensors is logical and needs a boolean Tensor, got {self.dtype}; "
                        "use -x for negation")
    return pw.logical_not(self)


def _method(op, doc: str):
    def method(self, *args, **kwargs):
        return op(self, *args, **kwargs)
    method.__name__ = op.__name__
    method.__doc__ = doc
    return method


def install(tensor_type: type) -> None:
    """Give ``tensor_type`` its operators (elementwise table ops and structural ops) and methods."""
    pairs = {"add": pw.add, "sub": pw.subtract, "mul": pw.multiply, "truediv": pw.divide,
             "floordiv": pw.floor_divide, "mod": pw.mod, "pow": pw.power, "matmul": matmul}
    for name, op in pairs.items():
        forward, reflected = _binary(op)
        setattr(tensor_type, f"__{name}__", forward)
        setattr(tensor_type, f"__r{name}__", reflected)
    comparisons = {"lt": pw.less, "le": pw.less_equal, "gt": pw.greater, "ge": pw.greater_equal,
                   "eq": pw.equal, "ne": pw.not_equal}
    for name, op in comparisons.items():
        setattr(tensor_type, f"__{name}__", _binary(op)[0])
    tensor_type.__hash__ = object.__hash__
    tensor_type.__neg__ = lambda self: pw.negative(self)
    tensor_type.__pos__ = lambda self: self
    tensor_type.__abs__ = lambda self: pw.abs(self)
    tensor_type.__getitem__ = lambda self, index: getitem(self, index)
    tensor_type.__iter__ = _iter
    tensor_type.__array__ = _array
    tensor_type.__float__ = _float
    tensor_type.__array_function__ = _array_function
    tensor_type.__array_ufunc__ = _UfuncOverride()
    tensor_type.numpy = _numpy
    tensor_type.T = property(_transposed)
    tensor_type.reshape = _reshape
    tensor_type.transpose = _transpose
    for op in (sum, mean, max, min):
        setattr(tensor_type, op.__name__, _reduction(op))
    for name, op in (("and", pw.logical_and), ("or", pw.logical_or)):
        forward, reflected = _logical(op, "&" if name == "and" else "|")
        setattr(tensor_type, f"__{name}__", forward)
        setattr(tensor_type, f"__r{name}__", reflected)
    tensor_type.__invert__ = _invert
    for op in (ops.astype, ops.any, ops.all, ops.argmax, ops.argmin, ops.var, ops.std, ops.prod,
               ops.cumsum, pw.clip, pw.exp, pw.log, pw.sqrt, pw.tanh, pw.sigmoid):
        setattr(tensor_type, op.__name__, _method(op, f"``mf.{op.__name__}(self, ...)``."))
