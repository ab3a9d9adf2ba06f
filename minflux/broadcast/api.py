"""The public face of the broadcast compiler: `elementwise`, `broadcast`, `scalar_rule`.

A scalar function is parsed once (`frontend`), typed for the kinds of its arguments (`kinds`),
transformed to carry partials for the arguments that need a gradient (`dual`) and run by a backend:
numba kernels on the CPU by default, the numpy evaluator as reference, CUDA for CuPy arrays (see
`run_on_device`). Inside `mf.gradient`, one call records ONE tape node whose partials come from the
kernel (mixed mode); ``mode="reverse"`` instead runs the scalar function op by op on Tensors.
"""
from __future__ import annotations

import functools
import os
from typing import Callable

import numpy as np

from ..autograd import active_tape
from ..backend import get_array_module
from ..tensor import Tensor
from .dual import DualFunction, differentiate
from .errors import CompileError
from .frontend import Parsed, parse
from .kinds import infer_kinds
from .node import broadcast_node
from .numpy_backend import ArrayOps, evaluate
from .rules import define

__all__ = ["CompileError", "ElementwiseFunction", "ScalarRuleFunction", "broadcast", "elementwise",
           "get_elementwise_backend", "scalar_rule", "set_elementwise_backend"]

_BACKENDS = ("numba", "numpy")
_backend = os.environ.get("MINFLUX_ELEMENTWISE", "numba").strip().lower() or "numba"


def set_elementwise_backend(name: str) -> None:
    """Choose the CPU backend of elementwise kernels: ``"numba"`` (default) or ``"numpy"``.

    The environment variable ``MINFLUX_ELEMENTWISE`` sets the initial choice.

    >>> import minflux as mf
    >>> mf.set_elementwise_backend("numpy"); mf.get_elementwise_backend()
    'numpy'
    >>> mf.set_elementwise_backend("numba")
    """
    global _backend
    if name not in _BACKENDS:
        raise ValueError(f"unknown elementwise backend {name!r}; choose one of {_BACKENDS} "
                         "(or set MINFLUX_ELEMENTWISE)")
    _backend = name


def get_elementwise_backend() -> str:
    """The CPU backend elementwise kernels use now (``"numba"`` or ``"numpy"``).

    >>> import minflux as mf
    >>> mf.get_elementwise_backend() in ("numba", "numpy")
    True
    """
    if _backend not in _BACKENDS:
        raise ValueError(f"MINFLUX_ELEMENTWISE={_backend!r} is not a backend; use one of {_BACKENDS}")
    return _backend


# -- compiled functions ----------------------------------------------------------------------------

class _Entry:
    """One parsed scalar function and everything compiled from it, per argument signature."""

    def __init__(self, fn: Callable, parsed: Parsed):
        self.fn = fn
        self.parsed = parsed
        self.typed: dict = {}
        self.duals: dict = {}
        self.kernels: dict = {}

    def valid(self, fn: Callable) -> bool:
        return all(b.still_valid(fn) for b in self.parsed.bindings)

    def typed_for(self, kinds: tuple):
        fn = self.typed.get(kinds)
        if fn is None:
            fn = self.typed[kinds] = infer_kinds(self.parsed.function, list(kinds))
        return fn

    def dual_for(self, kinds: tuple, wrt: tuple) -> DualFunction:
        key = (kinds, wrt)
        d = self.duals.get(key)
        if d is None:
            d = self.duals[key] = differentiate(self.typed_for(kinds), list(wrt))
        return d


_entries: dict = {}


def _entry(fn: Callable) -> _Entry:
    """The compiled entry for ``fn``, recompiled when a constant it reads has changed."""
    code = getattr(fn, "__code__", None)
    key = code if code is not None else fn
    candidates = _entries.get(key)
    if candidates:
        for entry in candidates:
            if entry.valid(fn):
                entry.fn = fn
                return entry
    entry = _Entry(fn, parse(fn))
    _entries.setdefault(key, []).insert(0, entry)
    del _entries[key][4:]
    return entry


class ElementwiseFunction:
    """A scalar function compiled to fused broadcast kernels; call it on arrays, Tensors or numbers.

    >>> import minflux as mf, numpy as np
    >>> @mf.elementwise
    ... def soft_sign(x):
    ...     if x >= 0:
    ...         return x / (1 + x)
    ...     return x / (1 - x)
    >>> soft_sign(np.array([-1.0, 0.0, 3.0]))
    array([-0.5 ,  0.  ,  0.75])
    >>> mf.gradient(lambda x: mf.sum(soft_sign(x)), np.array([-1.0, 1.0]))[0]
    array([0.25, 0.25])
    """

    def __init__(self, fn: Callable):
        if isinstance(fn, ElementwiseFunction):
            fn = fn.fn
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __call__(self, *args, mode: str = "mixed"):
        return broadcast(self, *args, mode=mode)

    def __repr__(self):
        return f"<elementwise {self.fn.__qualname__}>"


def elementwise(fn: Callable) -> ElementwiseFunction:
    """Decorate a scalar function so that calling it broadcasts a fused kernel over its arguments.

    The function may use ``if``/``elif``/``else``, early ``return``, ``while`` and ``for k in
    range(n)`` on the values of its arguments; inside `mf.gradient` each call is one tape node whose
    per-element partials the kernel computes in forward mode. See `minflux.broadcast.frontend` for
    the scalar language.

    >>> import minflux as mf, numpy as np
    >>> @mf.elementwise
    ... def axpy(a, x, y):
    ...     return a * x + y
    >>> axpy(2.0, np.ones(2), np.ones(2))
    array([3., 3.])
    """
    return ElementwiseFunction(fn)


class ScalarRuleFunction:
    """A scalar function with user-given partial derivatives: a new primitive of the derivative table.

    Calls inside elementwise functions use the function's own body for the value and the given rules
    for the partials; calls on arrays and Tensors broadcast it like ``mf.tanh``.
    """

    def __init__(self, fn: Callable, partials: tuple):
        self.fn = fn
        self.arity = fn.__code__.co_argcount
        if len(partials) > self.arity:
            raise TypeError(f"scalar_rule got {len(partials)} derivative rules for {fn.__qualname__}, "
                            f"which takes {self.arity} arguments")
        self.partials = tuple(partials) + (None,) * (self.arity - len(partials))
        self.op = f"{fn.__module__}.{fn.__qualname__}"
        self._subroutine = None
        define(self.op, self._impl, *self.partials, doc=fn.__doc__ or "")
        functools.update_wrapper(self, fn)

    def _impl(self, xp, *args):
        return broadcast(_PrimalOnly(self.fn), *args)

    def subroutines(self) -> dict:
        """The typed primal IR of this function (and of the rules it calls), by primitive name."""
        if self._subroutine is None:
            parsed = _entry(self.fn).parsed
            typed = infer_kinds(parsed.function, ["f"] * self.arity, output_kinds=["f"])
            if typed.n_outputs != 1:
                raise CompileError(f"a scalar_rule function must return one value; "
                                   f"{self.fn.__qualname__} returns {typed.n_outputs}")
            self._subroutine = {**typed.subroutines, self.op: typed}
        return self._subroutine

    def __call__(self, *args):
        from ..elementwise import apply_primitive
        return apply_primitive(self.op, *args)

    def __repr__(self):
        return f"<scalar_rule {self.fn.__qualname__}>"


class _PrimalOnly:
    """Marks a function whose broadcast never records a tape node (a rule's value)."""

    def __init__(self, fn):
        self.fn = fn


def scalar_rule(*partials) -> Callable[[Callable], ScalarRuleFunction]:
    """Give a scalar function its own derivative: one rule ``lambda m, *args, y: ...`` per argument.

    Rules are written like those of the derivative table (operators, numbers and ``m.<primitive>``
    calls; ``y`` is the function's value); ``None`` or a missing trailing rule makes that argument
    non-differentiable. A straight-through step function whose derivative is a hard sigmoid's slope:

    >>> import minflux as mf, numpy as np
    >>> @mf.scalar_rule(lambda m, x, a, y: m.where(abs(x) < 1 / a, a / 2, 0.0))
    ... def step(x, a):
    ...     return 1.0 if x > 0 else 0.0
    >>> step(np.array([-0.1, 0.3, 2.0]), 1.0)
    array([0., 1., 1.])
    >>> mf.gradient(lambda x: mf.sum(step(x, 1.0)), np.array([-0.1, 0.3, 2.0]))[0]
    array([0.5, 0.5, 0. ])
    """
    for p in partials:
        if p is not None and not callable(p):
            raise TypeError(f"scalar_rule takes derivative rules (callables or None), got {p!r}")

    def decorate(fn):
        return ScalarRuleFunction(fn, partials)

    return decorate


# -- calling ---------------------------------------------------------------------------------------

_ARRAY_KINDS: dict = {}


def _kind_and_dtype(value, position: int):
    if value.__class__ is np.ndarray:
        found = _ARRAY_KINDS.get(value.dtype)
        if found is not None:
            return found
    if isinstance(value, (bool, np.bool_)):
        return "b", None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return "i", None
    if isinstance(value, (float, np.floating)) and np.ndim(value) == 0 and not hasattr(value, "shape"):
        return "f", None
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        raise TypeError(f"argument {position} of an elementwise function is a {type(value).__name__}; "
                        "pass arrays, Tensors or Python numbers")
    kind = np.dtype(dtype).kind
    found = ("b", np.dtype(bool)) if kind == "b" else ("i", np.dtype(np.int64)) if kind in "iu" else \
        ("f", np.dtype(dtype)) if kind == "f" else None
    if found is not None:
        if value.__class__ is np.ndarray:
            _ARRAY_KINDS[value.dtype] = found
        return found
    raise TypeError(f"argument {position} of an elementwise function has dtype {dtype}; use float, "
                    "int or bool arrays")


_FLOAT_DTYPES: dict = {}


def _float_dtype(dtypes: list) -> np.dtype:
    key = tuple(d for d in dtypes if d is not None and d.kind == "f")
    found = _FLOAT_DTYPES.get(key)
    if found is None:
        found = _FLOAT_DTYPES[key] = np.dtype(np.result_type(*key)) if key else np.dtype(np.float64)
    return found


_SHAPES: dict = {}


def _broadcast_shape(shapes: tuple) -> tuple:
    found = _SHAPES.get(shapes)
    if found is None:
        found = _SHAPES[shapes] = tuple(np.broadcast_shapes(*shapes))
    return found


def _convert(value, kind: str, float_dtype, xp):
    """An argument as an array (or 0-d array) of its kind's dtype."""
    dtype = float_dtype if kind == "f" else np.dtype(np.int64) if kind == "i" else np.dtype(bool)
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return value if value.dtype == dtype else value.astype(dtype)
    if xp is not np:  # CuPy kernels take numpy scalars by value: no host-to-device copy per call
        return dtype.type(value)
    return xp.asarray(value, dtype=dtype)


def run_on_device(dual: DualFunction, arrays: list, kinds: tuple, float_dtype, shape: tuple) -> list:
    """Run a transformed kernel on CuPy arrays: the CUDA backend's entry point.

    Returns one CuPy array of ``shape`` per output of ``dual.function``.
    """
    from . import cuda_backend
    return cuda_backend.run(dual, arrays, kinds, float_dtype, shape)


def _run_numpy(dual: DualFunction, arrays: list, float_dtype, shape: tuple, xp) -> list:
    fn = dual.function
    outs = evaluate(fn, arrays, ArrayOps(xp, float_dtype, fn.subroutines))
    result = []
    kinds = fn.output_kinds
    for out, kind in zip(outs, kinds):
        dtype = float_dtype if kind == "f" else np.dtype(np.int64) if kind == "i" else np.dtype(bool)
        out = xp.asarray(out)
        if out.shape == shape and out.dtype == dtype and not any(out is a for a in arrays + result):
            result.append(out)
        else:
            full = xp.empty(shape, dtype)
            full[...] = out
            result.append(full)
    return result


def _run_kernel(entry: _Entry, arrays: list, kinds: tuple, float_dtype, wrt: tuple, xp, shape):
    dual = entry.dual_for(kinds, wrt)
    if xp is not np:
        return dual, run_on_device(dual, arrays, kinds, float_dtype, shape)
    if get_elementwise_backend() == "numpy":
        return dual, _run_numpy(dual, arrays, float_dtype, shape, xp)
    from . import numba_backend
    return dual, numba_backend.run(entry, dual, arrays, kinds, float_dtype, shape)


def broadcast(fn: Callable, *args, mode: str = "mixed"):
    """Broadcast the scalar function ``fn`` over ``args`` (arrays, Tensors or numbers).

    ``mode="mixed"`` (default) runs one fused kernel that also computes per-element partials for
    the arguments being differentiated and records one tape node; ``mode="reverse"`` runs ``fn``
    op by op on Tensors (branches as ``where``, loops as masked iterations), one tape node per op.
    Returns an array (a tuple of arrays for several outputs), or Tensors inside `mf.gradient`.

    >>> import minflux as mf, numpy as np
    >>> xs = np.array([-4.0, 4.0])
    >>> mf.broadcast(lambda x: x if x < 0 else mf.sqrt(x), xs)
    array([-4.,  2.])
    >>> mf.gradient(lambda x: mf.sum(mf.broadcast(lambda x: x if x < 0 else mf.sqrt(x), x)), xs)[0]
    array([1.  , 0.25])
    """
    if mode not in ("mixed", "reverse"):
        raise ValueError(f'mode must be "mixed" or "reverse", got {mode!r}')
    if isinstance(fn, ScalarRuleFunction):
        return fn(*args)  # a primitive: its compiled value and its own rules, one tape node
    primal_only = isinstance(fn, _PrimalOnly)
    raw = fn.fn if isinstance(fn, (ElementwiseFunction, _PrimalOnly)) else fn
    if not callable(raw):
        raise TypeError(f"broadcast needs a scalar function, got {type(fn).__name__}")
    entry = _entry(raw)
    n_params = len(entry.parsed.function.params)
    if len(args) != n_params:
        raise TypeError(f"{raw.__qualname__} takes {n_params} argument(s), got {len(args)}")
    values = [a.value if isinstance(a, Tensor) else a for a in args]
    name = raw.__name__
    xp = get_array_module(*values, op=f"elementwise function {name}")
    kd = [_kind_and_dtype(v, i) for i, v in enumerate(values)]
    kinds = tuple(k for k, _ in kd)
    float_dtype = _float_dtype([d for _, d in kd])
    arrays = [_convert(v, k, float_dtype, xp) for v, k in zip(values, kinds)]
    try:
        shape = _broadcast_shape(tuple(a.shape for a in arrays))
    except ValueError:
        shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
        raise ValueError(f"elementwise function {name}: cannot broadcast argument shapes {shapes}") from None
    if mode == "reverse":
        return _reverse(entry, args, arrays, kinds, float_dtype, shape, xp)
    tape = None if primal_only else active_tape()
    wrt = ()
    if tape is not None:
        wrt = tuple(k for k, a in enumerate(args)
                    if kinds[k] == "f" and isinstance(a, Tensor) and a._tape is tape)
    dual, outs = _run_kernel(entry, arrays, kinds, float_dtype, wrt, xp, shape)
    n = dual.n_outputs
    outputs = outs[:n]
    if not wrt:
        if any(isinstance(a, Tensor) for a in args):
            outputs = [Tensor(o) for o in outputs]
        return tuple(outputs) if n > 1 else outputs[0]
    partials = dict(dual.constants)
    for (m, k), array in zip(dual.slots, outs[n:]):
        partials[(m, k)] = array
    result = broadcast_node(name, args, outputs, partials, fresh=True)
    return tuple(result) if n > 1 else result


# -- reverse mode ----------------------------------------------------------------------------------

class _TapeOps(ArrayOps):
    """Evaluator ops that apply minflux elementwise ops, so each one is a tape node."""

    def call(self, op, args):
        from ..elementwise import apply_primitive
        if op in ("float", "int"):
            plain = [a.value if isinstance(a, Tensor) else a for a in args]
            return ArrayOps.call(self, op, plain)
        return apply_primitive(op, *args)

    def select(self, mask, new, old):
        from ..elementwise import apply_primitive
        return apply_primitive("where", mask, new, old)

    def truth(self, value):
        return ArrayOps.truth(self, value.value if isinstance(value, Tensor) else value)


def _reverse(entry: _Entry, args, arrays, kinds, float_dtype, shape, xp):
    from ..elementwise import apply_primitive
    fn = entry.typed_for(kinds)
    inputs = [a if isinstance(a, Tensor) and kind == "f" else arr
              for a, arr, kind in zip(args, arrays, kinds)]
    outs = evaluate(fn, inputs, _TapeOps(xp, float_dtype, fn.subroutines))
    result = []
    for out, kind in zip(outs, fn.output_kinds):
        value = out.value if isinstance(out, Tensor) else out
        if tuple(np.shape(value)) != shape:
            dtype = float_dtype if kind == "f" else np.dtype(np.int64) if kind == "i" else np.dtype(bool)
            out = apply_primitive("add", out, xp.zeros(shape, dtype)) if kind == "f" else \
                xp.broadcast_to(xp.asarray(value, dtype), shape).copy()
        elif not isinstance(out, Tensor) and not hasattr(out, "shape"):
            out = xp.asarray(out)
        result.append(out)
    return tuple(result) if len(result) > 1 else result[0]
