"""A compiled scalar function: its IR and every kernel built from it, run on plain arrays.

`compiled(fn)` parses a Python scalar function once (`frontend`) and returns a `CompiledFunction`
that owns every cache derived from it: the IR typed for each tuple of argument kinds (`kinds`), the
differentiated form for each set of differentiated arguments and AD mode (forward-mode duals,
`dual`, or the element-local adjoint, `adjoint`, chosen per kernel by `cost` in mode ``"auto"``),
and the backend kernels for each float type and input layout. `CompiledFunction.run` evaluates the transformed function on
arrays with the backend of their array module: numba kernels on numpy arrays (or the vectorised
numpy evaluator, see `set_elementwise_backend`), CUDA C on CuPy arrays. This module knows nothing
of tapes or Tensors.

>>> import numpy as np
>>> def axpy(a, x):
...     return a * x + 1.0
>>> kinds, float_dtype, arrays, shape = prepare([2.0, np.ones(3)], "axpy")
>>> dual, outs = compiled(axpy).run(arrays, kinds, float_dtype, (1,), shape)
>>> outs, dual.slots          # the output, then d output / d x
([array([3., 3., 3.]), array([2., 2., 2.])], [(0, 1)])
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Callable

import numpy as np

from ..backend import get_array_module
from ..schedule.operation import operation
from .dtypes import kind_dtype
from .adjoint import adjoint, supports_adjoint
from .cost import prefer_adjoint
from .dependence import with_structural_zeros
from .dual import DualFunction, differentiate
from .frontend import Parsed, parse
from .ir import Function
from .kinds import infer_kinds
from .layout import plan, signature
from .loop_limit import check_loop_flags, get_max_loop_iterations
from .numpy_backend import ArrayOps, evaluate

__all__ = ["KERNEL_MODES", "CompiledFunction", "compiled", "get_elementwise_backend", "prepare", "primal",
           "set_elementwise_backend"]

_BACKENDS = ("numba", "numpy")
_LAUNCHERS_LIMIT = 1024   # launchers kept per function (one per argument layout and shape)
KERNEL_MODES = ("auto", "mixed", "adjoint")   # how a kernel computes its partials
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


class CompiledFunction:
    """One parsed scalar function and everything compiled from it.

    >>> cf = compiled(lambda x: x * x)
    >>> cf.dual_for(("f",), (0,)).slots
    [(0, 0)]
    """

    def __init__(self, fn: Callable, parsed: Parsed):
        self.fn = fn
        self.parsed = parsed
        self.name = getattr(fn, "__name__", "function")
        self.n_params = len(parsed.function.params)
        self.typed: dict = {}
        self.duals: dict = {}
        self.kernels: dict = {}
        self.launchers: dict = {}

    def valid(self, fn: Callable) -> bool:
        """True while every free name the function read at compile time still has its value (and
        the loop iteration cap compiled into its while loops is still the current one)."""
        if self.parsed.loop_sites and self.parsed.loop_limit != get_max_loop_iterations():
            return False
        return all(b.still_valid(fn) for b in self.parsed.bindings)

    def check_loops(self, outputs: list, n_outputs: int) -> list:
        """``outputs`` without the flag output of capped while loops (raising `LoopLimitError` when
        a loop was stopped); ``n_outputs`` counts the function's primal outputs, the flag included."""
        if not self.parsed.loop_sites:
            return outputs
        flag = n_outputs - 1
        check_loop_flags(outputs[flag], self.parsed.loop_sites, self.name, self.parsed.loop_limit)
        return outputs[:flag] + outputs[flag + 1:]

    def typed_for(self, kinds: tuple) -> Function:
        """The IR typed for arguments of ``kinds`` (memoised)."""
        fn = self.typed.get(kinds)
        if fn is None:
            fn = self.typed[kinds] = infer_kinds(self.parsed.function, list(kinds))
        return fn

    def dual_for(self, kinds: tuple, wrt: tuple, mode: str = "auto") -> DualFunction:
        """The IR that also returns the partials for arguments ``wrt`` (memoised).

        ``mode`` is ``"mixed"`` (forward-mode duals), ``"adjoint"`` (the element-local adjoint,
        loop-free functions only) or ``"auto"``: the adjoint where the cost model finds it
        cheaper, duals otherwise. In every mode, ``constants`` holds a 0 for each pair whose partial
        folded to zero although the output depends on the input (`dependence`), so every mode and
        the tape give that input a zero gradient, and None only where nothing differentiable links them.
        """
        if not wrt and mode in KERNEL_MODES:
            mode = "mixed"     # nothing to differentiate: one primal function for every mode
        key = (kinds, wrt, mode)
        d = self.duals.get(key)
        if d is None:
            if mode not in KERNEL_MODES:
                raise ValueError(f"unknown kernel mode {mode!r}; use one of {KERNEL_MODES}")
            typed = self.typed_for(kinds)
            if mode == "adjoint":
                d = with_structural_zeros(adjoint(typed, list(wrt)), typed)
            elif mode == "mixed" or not wrt or not supports_adjoint(typed):
                d = self.dual_for(kinds, wrt, "mixed") if mode != "mixed" else \
                    with_structural_zeros(differentiate(typed, list(wrt)), typed)
            else:
                duals, reverse = self.dual_for(kinds, wrt, "mixed"), self.dual_for(kinds, wrt, "adjoint")
                d = reverse if prefer_adjoint(duals, reverse) else duals
            self.duals[key] = d
        return d

    def run(self, arrays: list, kinds: tuple, float_dtype, wrt: tuple, shape: tuple, mode: str = "auto"):
        """Evaluate the transformed function on ``arrays``; returns ``(dual, outputs)``.

        ``arrays`` come from `prepare`; ``outputs`` are new arrays of ``shape``: the function's
        outputs, then one partial per entry of ``dual.slots``; ``mode`` as in `dual_for`.
        """
        dual = self.dual_for(kinds, wrt, mode)
        outs = _launch(self, dual, arrays, float_dtype, shape)
        if not self.parsed.loop_sites:
            return dual, outs
        hit = self.duals.get(("without flag", id(dual)))
        if hit is None or hit[0] is not dual:  # the same partials, without the flag output
            hit = self.duals[("without flag", id(dual))] = (dual, dataclasses.replace(
                dual, n_outputs=dual.n_outputs - 1))
        return hit[1], outs

    def _run_numba(self, dual: DualFunction, arrays: list, float_dtype, shape: tuple) -> list:
        return self.numba_launcher(dual, arrays, float_dtype, shape)(arrays)

    def numba_launcher(self, dual: DualFunction, arrays: list, float_dtype, shape: tuple):
        """The numba `Launcher` of ``dual`` for arrays laid out as ``arrays`` are (memoised)."""
        from . import numba_backend  # numba is imported on the first kernel, not with minflux

        layout = plan(arrays, shape)
        key = (id(dual), float_dtype, layout, shape, numba_backend.BRANCHES)
        hit = self.launchers.get(key)
        if hit is None or hit[0] is not dual:
            kernel_key = ("numba", id(dual), float_dtype, layout.patterns, numba_backend.BRANCHES)
            built = self.kernels.get(kernel_key)
            if built is None or built[0] is not dual:
                built = self.kernels[kernel_key] = (
                    dual, numba_backend.build_kernel(dual, float_dtype, layout.patterns))
            if len(self.launchers) >= _LAUNCHERS_LIMIT:
                self.launchers.clear()
            hit = self.launchers[key] = (dual, numba_backend.launcher(built[1], dual, layout, float_dtype,
                                                                       shape))
        return hit[1]

    def _run_cuda(self, dual: DualFunction, arrays: list, float_dtype, shape: tuple) -> list:
        from . import cuda_backend  # CuPy is imported only for CuPy arrays

        key = ("cuda", id(dual), np.dtype(float_dtype).str, cuda_backend.get_fast_math())
        hit = self.kernels.get(key)
        if hit is None or hit[0] is not dual:
            hit = self.kernels[key] = (dual, cuda_backend.build_kernel(dual, float_dtype))
        return cuda_backend.launch(hit[1], arrays, float_dtype, shape)


def _replayed_launch(cf: CompiledFunction, dual: DualFunction, arrays: list, float_dtype, shape: tuple):
    """What a recorded step replays for this launch: a numba `Launcher` bound once (see `_Replayed`)."""
    if get_array_module(*arrays) is np and get_elementwise_backend() == "numba":
        return _Replayed(cf.numba_launcher(dual, arrays, float_dtype, shape), signature(arrays))
    return None


@operation(replayed=_replayed_launch)
def _launch(cf: CompiledFunction, dual: DualFunction, arrays: list, float_dtype, shape: tuple) -> list:
    """One evaluation of ``dual`` on the current backend, the loop-cap check included."""
    xp = get_array_module(*arrays)
    if xp is not np:
        outs = cf._run_cuda(dual, arrays, float_dtype, shape)
    elif get_elementwise_backend() == "numpy":
        outs = _run_numpy(dual, arrays, float_dtype, shape, xp)
    else:
        outs = cf._run_numba(dual, arrays, float_dtype, shape)
    return cf.check_loops(outs, dual.n_outputs) if cf.parsed.loop_sites else outs


class _Replayed:
    """`_launch` with its kernel and layout chosen when it was recorded; arrays laid out otherwise
    (or another backend) take the whole path."""

    __slots__ = ("launcher", "signature")

    def __init__(self, launcher, signature: tuple):
        self.launcher, self.signature = launcher, signature

    def __call__(self, cf: CompiledFunction, dual: DualFunction, arrays: list, float_dtype, shape: tuple):
        if signature(arrays) != self.signature or get_elementwise_backend() != "numba":
            return _launch.__wrapped_operation__(cf, dual, arrays, float_dtype, shape)
        outs = self.launcher(arrays)
        return cf.check_loops(outs, dual.n_outputs) if cf.parsed.loop_sites else outs


_compiled: dict = {}


def compiled(fn: Callable) -> CompiledFunction:
    """The compiled function for ``fn``, recompiled when a constant it reads has changed.

    >>> def square(x):
    ...     return x * x
    >>> compiled(square) is compiled(square)
    True
    """
    code = getattr(fn, "__code__", None)
    key = code if code is not None else fn
    candidates = _compiled.get(key)
    if candidates:
        for entry in candidates:
            if entry.valid(fn):
                entry.fn = fn
                return entry
    entry = CompiledFunction(fn, parse(fn))
    _compiled.setdefault(key, []).insert(0, entry)
    del _compiled[key][4:]
    return entry


_from_ir: dict = {}
_FROM_IR_LIMIT = 1024


def compiled_ir(key, build: Callable[[], Function]) -> CompiledFunction:
    """The compiled function of an IR built by ``build()`` (untyped, as the frontend makes it),
    memoised by ``key``: a canonical description of that IR (the fusion of pending expressions
    uses it for structures it has written itself, with no Python source behind them).

    >>> from minflux.compiler.ir import Assign, Call, Return, Var
    >>> ir = lambda: Function("double", ["a"], [Assign("t0", Call("add", (Var("a"), Var("a")))),
    ...                                          Return((Var("t0"),))], temps={"t0"})
    >>> cf = compiled_ir(("double",), ir)
    >>> cf is compiled_ir(("double",), ir), cf.run([np.ones(2)], ("f",), np.float64, (), (2,))[1]
    (True, [array([2., 2.])])
    """
    cf = _from_ir.get(key)
    if cf is None:
        function = build()
        if len(_from_ir) >= _FROM_IR_LIMIT:
            # the oldest structure goes; its machine code stays loaded in the backend and on disk,
            # so building that structure again redoes the IR passes only
            del _from_ir[next(iter(_from_ir))]
        cf = _from_ir[key] = CompiledFunction(None, Parsed(function, []))
        cf.name = function.name
    return cf


def is_compiled_ir(key) -> bool:
    """Whether `compiled_ir` has built ``key`` in this process."""
    return key in _from_ir


def primal(fn: Callable, *values):
    """``fn`` broadcast over ``values`` (arrays or numbers) with no partials: its outputs only.

    >>> primal(lambda x, y: x * y, np.arange(3.0), 2.0)
    array([0., 2., 4.])
    """
    cf = compiled(fn)
    if len(values) != cf.n_params:
        raise TypeError(f"{cf.name} takes {cf.n_params} argument(s), got {len(values)}")
    kinds, float_dtype, arrays, shape = prepare(values, cf.name)
    dual, outs = cf.run(arrays, kinds, float_dtype, (), shape)
    return tuple(outs) if dual.n_outputs > 1 else outs[0]


# -- arguments -------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)
def _array_kind(dtype: np.dtype):
    kind = dtype.kind
    if kind == "b":
        return "b", np.dtype(bool)
    if kind in "iu":
        return "i", np.dtype(np.int64)
    if kind == "f":
        return "f", dtype
    return None


def _kind_and_dtype(value, position: int, name: str):
    if isinstance(value, (bool, np.bool_)):
        return "b", None
    if isinstance(value, (int, np.integer)):
        return "i", None
    if isinstance(value, (float, np.floating)) and not hasattr(value, "shape"):
        return "f", None
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        raise TypeError(f"argument {position} of elementwise function {name} is a {type(value).__name__}; "
                        "pass arrays, Tensors or Python numbers")
    found = _array_kind(np.dtype(dtype))
    if found is None:
        raise TypeError(f"argument {position} of elementwise function {name} has dtype {dtype}; use "
                        "float, int or bool arrays")
    return found


@functools.lru_cache(maxsize=256)
def _float_dtype(dtypes: tuple) -> np.dtype:
    return np.dtype(np.result_type(*dtypes)) if dtypes else np.dtype(np.float64)


@functools.lru_cache(maxsize=1024)
def _broadcast_shape(shapes: tuple) -> tuple:
    return tuple(np.broadcast_shapes(*shapes))


def _convert(value, kind: str, float_dtype, xp):
    """An argument as an array (or 0-d array) of its kind's dtype."""
    dtype = kind_dtype(kind, float_dtype)
    if hasattr(value, "dtype") and hasattr(value, "shape"):
        return value if value.dtype == dtype else value.astype(dtype)
    if xp is not np:  # CuPy kernels take numpy scalars by value: no host-to-device copy per call
        return dtype.type(value)
    return xp.asarray(value, dtype=dtype)


def prepare(values, name: str, float_dtype=None):
    """Classify and convert a call's arguments (plain arrays and numbers).

    Returns ``(kinds, float_dtype, arrays, shape)``: each argument's IR kind, the kernel's float
    dtype (the float arrays' promoted dtype, float64 when there are none; ``float_dtype`` when
    given, which must hold every float argument exactly), the arguments as arrays of their kinds'
    dtypes, and the broadcast shape.

    >>> prepare([np.ones((2, 1), np.float32), 3], "f")[::3]
    (('f', 'i'), (2, 1))
    """
    xp = get_array_module(*values, op=f"elementwise function {name}")
    kd = [_kind_and_dtype(v, i, name) for i, v in enumerate(values)]
    kinds = tuple(k for k, _ in kd)
    if float_dtype is None:
        float_dtype = _float_dtype(tuple(d for k, d in kd if k == "f" and d is not None))
    else:
        float_dtype = np.dtype(float_dtype)
    arrays = [_convert(v, k, float_dtype, xp) for v, k in zip(values, kinds)]
    try:
        shape = _broadcast_shape(tuple(a.shape for a in arrays))
    except ValueError:
        shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
        raise ValueError(f"elementwise function {name}: cannot broadcast argument shapes {shapes}") from None
    return kinds, float_dtype, arrays, shape


def _run_numpy(dual: DualFunction, arrays: list, float_dtype, shape: tuple, xp) -> list:
    fn = dual.function
    outs = evaluate(fn, arrays, ArrayOps(xp, float_dtype, fn.subroutines))
    result = []
    for out, kind in zip(outs, fn.output_kinds):
        dtype = kind_dtype(kind, float_dtype)
        out = xp.asarray(out)
        if out.shape == shape and out.dtype == dtype and not any(out is a for a in arrays + result):
            result.append(out)
        else:
            full = xp.empty(shape, dtype)
            full[...] = out
            result.append(full)
    return result
