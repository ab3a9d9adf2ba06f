"""A compiled scalar function: its IR and every kernel built from it, run on plain arrays.

`compiled(fn)` parses a Python scalar function once (`frontend`) and returns a `CompiledFunction`
that owns every cache derived from it: the IR typed for each tuple of argument kinds (`kinds`), the
differentiated form for each set of differentiated arguments and AD mode (forward-mode duals,
`dual`, or the element-local adjoint, `adjoint`, chosen per kernel by `cost` in mode ``"auto"``),
and the backend kernels for each float type and input layout. `CompiledFunction.run` evaluates the
transformed function on arrays with the backend of their array module (`launch_kernel`): numba
kernels on numpy arrays (or the vectorised numpy evaluator, see `set_elementwise_backend`), CUDA C on
CuPy arrays; `bound_launch` is a launch whose kernel and layout are chosen once, for a caller that
repeats it on arrays laid out alike. This module knows nothing of tapes, Tensors or recordings:
launches are plain calls, and whoever records them wraps them (`minflux.pointwise.launch`).

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
from typing import Callable

import numpy as np

from ..backend import get_array_module
from ..runtime import settings
from .adjoint import adjoint, supports_adjoint
from .arguments import prepare
from .cost import prefer_adjoint
from .dtypes import kind_dtype
from .dependence import with_structural_zeros
from .dual import DualFunction, differentiate
from .frontend import Parsed, parse
from .ir import Function
from .kinds import infer_kinds
from .layout import plan, signature
from .loop_limit import check_loop_flags, get_max_loop_iterations
from .numpy_backend import ArrayOps, evaluate

__all__ = ["KERNEL_MODES", "BoundLaunch", "CompiledFunction", "bound_launch", "compiled", "get_elementwise_backend",
           "launch_kernel", "prepare", "primal", "set_elementwise_backend"]

_BACKENDS = ("numba", "numpy")
_LAUNCHERS_LIMIT = 1024   # launchers kept per function (one per argument layout and shape)
KERNEL_MODES = ("auto", "mixed", "adjoint")   # how a kernel computes its partials


def set_elementwise_backend(name: str) -> None:
    """Choose the CPU backend of elementwise kernels: ``"numba"`` (default) or ``"numpy"``.

    The environment variable ``MINFLUX_ELEMENTWISE`` sets the initial choice.

    >>> import minflux as mf
    >>> mf.set_elementwise_backend("numpy"); mf.get_elementwise_backend()
    'numpy'
    >>> mf.set_elementwise_backend("numba")
    """
    if name not in _BACKENDS:
        raise ValueError(f"unknown elementwise backend {name!r}; choose one of {_BACKENDS} "
                         "(or set MINFLUX_ELEMENTWISE)")
    settings.set("elementwise_backend", name)


def get_elementwise_backend() -> str:
    """The CPU backend elementwise kernels use now (``"numba"`` or ``"numpy"``).

    >>> import minflux as mf
    >>> mf.get_elementwise_backend() in ("numba", "numpy")
    True
    """
    return settings.get("elementwise_backend")


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

    def run(self, arrays: list, kinds: tuple, float_dtype, wrt: tuple, shape: tuple, mode: str = "auto",
            launch: Callable | None = None):
        """Evaluate the transformed function on ``arrays``; returns ``(dual, outputs)``.

        ``arrays`` come from `prepare`; ``outputs`` are new arrays of ``shape``: the function's
        outputs, then one partial per entry of ``dual.slots``; ``mode`` as in `dual_for`.
        ``launch`` runs the kernel, with `launch_kernel`'s arguments: `launch_kernel` when not given
        (a caller that records its launches passes its own).
        """
        dual = self.dual_for(kinds, wrt, mode)
        outs = (launch or launch_kernel)(self, dual, arrays, float_dtype, shape)
        if not self.parsed.loop_sites:
            return dual, outs
        hit = self.duals.get(("without flag", id(dual)))
        if hit is None or hit[0] is not dual:  # the same partials, without the flag output
            hit = self.duals[("without flag", id(dual))] = (dual, dataclasses.replace(
                dual, n_outputs=dual.n_outputs - 1))
        return hit[1], outs

    def numba_launcher(self, dual: DualFunction, arrays: list, float_dtype, shape: tuple):
        """The numba `Launcher` of ``dual`` for arrays laid out as ``arrays`` are (memoised)."""
        layout = plan(arrays, shape)
        compiler = settings.get("kernel_compiler"), settings.get("numba_branches")
        key = (id(dual), float_dtype, layout, shape, compiler)
        hit = self.launchers.get(key)
        if hit is None or hit[0] is not dual:
            from . import llvm_backend, numba_backend  # LLVM and numba load on the first kernel, not with minflux

            kernel_key = ("cpu", id(dual), float_dtype, layout.patterns, compiler)
            built = self.kernels.get(kernel_key)
            if built is None or built[0] is not dual:
                try:
                    if compiler[0] != "llvm":
                        raise llvm_backend.Unspelled("numba chosen")
                    kernel = llvm_backend.build_kernel(dual, float_dtype, layout.patterns)
                except llvm_backend.Unspelled:   # a primitive that only numba spells
                    kernel = numba_backend.build_kernel(dual, float_dtype, layout.patterns)
                built = self.kernels[kernel_key] = (dual, kernel)
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


def launch_kernel(cf: CompiledFunction, dual: DualFunction, arrays: list, float_dtype, shape: tuple) -> list:
    """One evaluation of ``dual`` (transformed from ``cf``) on the current backend, the loop-cap check
    included: new arrays of ``shape``, the outputs and then the partials (`CompiledFunction.run`).

    >>> cf = compiled(lambda x: x * x)
    >>> kinds, float_dtype, arrays, shape = prepare([np.arange(2.0)], "square")
    >>> launch_kernel(cf, cf.dual_for(kinds, (0,)), arrays, float_dtype, shape)   # x * x, then 2 x
    [array([0., 1.]), array([0., 2.])]
    """
    xp = get_array_module(*arrays)
    if xp is not np:
        outs = cf._run_cuda(dual, arrays, float_dtype, shape)
    elif get_elementwise_backend() == "numpy":
        outs = _run_numpy(dual, arrays, float_dtype, shape, xp)
    else:
        outs = cf.numba_launcher(dual, arrays, float_dtype, shape)(arrays)
    return cf.check_loops(outs, dual.n_outputs) if cf.parsed.loop_sites else outs


def bound_launch(cf: CompiledFunction, dual: DualFunction, arrays: list, float_dtype, shape: tuple):
    """`launch_kernel` for arrays laid out as ``arrays`` are, its kernel and layout chosen now (a
    `BoundLaunch`), or None where nothing is chosen ahead (the numpy backend, CuPy arrays).

    >>> cf = compiled(lambda x: x * 3.0)
    >>> kinds, float_dtype, arrays, shape = prepare([np.arange(2.0)], "triple")
    >>> dual = cf.dual_for(kinds, ())
    >>> bound = bound_launch(cf, dual, arrays, float_dtype, shape)
    >>> bound is None or bound(cf, dual, arrays, float_dtype, shape)[0].tolist() == [0.0, 3.0]
    True
    """
    if get_array_module(*arrays) is np and get_elementwise_backend() == "numba":
        return BoundLaunch(cf.numba_launcher(dual, arrays, float_dtype, shape), signature(arrays))
    return None


class BoundLaunch:
    """`launch_kernel` with its numba kernel and layout chosen once; arrays laid out otherwise (or
    another backend) take the whole path. ``out``: arrays to write the outputs into (None for an
    output to allocate), as a recorded schedule's buffers give them.

    >>> cf = compiled(lambda x: x * 3.0)
    >>> kinds, float_dtype, arrays, shape = prepare([np.arange(2.0)], "triple")
    >>> dual = cf.dual_for(kinds, ())
    >>> bound = BoundLaunch(cf.numba_launcher(dual, arrays, float_dtype, shape), signature(arrays))
    >>> out = [np.empty(2)]
    >>> get_elementwise_backend() == "numpy" or bound(cf, dual, arrays, float_dtype, shape, out)[0] is out[0]
    True
    """

    __slots__ = ("launcher", "signature")
    fills_new_results = True
    """Its native command may be made for the results a call made new (`minflux.schedule.native_probe`)."""

    def __init__(self, launcher, signature: tuple):
        self.launcher, self.signature = launcher, signature

    def __call__(self, cf: CompiledFunction, dual: DualFunction, arrays: list, float_dtype, shape: tuple,
                 out: list | None = None):
        if signature(arrays) != self.signature or get_elementwise_backend() != "numba":
            return launch_kernel(cf, dual, arrays, float_dtype, shape)
        if out is not None and cf.parsed.loop_sites:   # the loops' flag output is not a result
            flag = dual.n_outputs - 1
            out = [*out[:flag], None, *out[flag:]]
        outs = self.launcher(arrays, out)
        return cf.check_loops(outs, dual.n_outputs) if cf.parsed.loop_sites else outs

    def native_command(self, args: tuple, kwargs: dict, errstate: dict):
        """The native runner's `Command` for the call ``self(*args, **kwargs)`` when it writes every
        output into ``out`` (`numba_backend.Launcher.command`), or None (`minflux.schedule.native`)."""
        cf, dual, arrays = args[:3]
        out = args[5] if len(args) > 5 else kwargs.get("out")
        if (out is None or cf.parsed.loop_sites or signature(arrays) != self.signature
                or get_elementwise_backend() != "numba"):
            return None
        command = self.launcher.command(arrays, out)
        if command is None or command.refresh is None:
            return command
        write, reads = command.refresh   # of the arrays, the call's third argument
        return command._replace(refresh=(lambda args, kwargs: write(args[2]), lambda args, kwargs: reads(args[2])))


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


def primal(fn: Callable, *values, launch: Callable | None = None):
    """``fn`` broadcast over ``values`` (arrays or numbers) with no partials: its outputs only
    (``launch`` as in `CompiledFunction.run`).

    >>> primal(lambda x, y: x * y, np.arange(3.0), 2.0)
    array([0., 2., 4.])
    """
    cf = compiled(fn)
    if len(values) != cf.n_params:
        raise TypeError(f"{cf.name} takes {cf.n_params} argument(s), got {len(values)}")
    kinds, float_dtype, arrays, shape = prepare(values, cf.name)
    dual, outs = cf.run(arrays, kinds, float_dtype, (), shape, launch=launch)
    return tuple(outs) if dual.n_outputs > 1 else outs[0]


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
