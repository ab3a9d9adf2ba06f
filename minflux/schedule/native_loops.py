"""numpy's own ufunc loops as native commands: what numpy computes elementwise, with numpy's bits.

An elementwise ufunc whose loop the runner does not write itself (``np.tanh``, ``np.exp``,
``np.power``, ``np.maximum``...; not a generalized ufunc such as ``np.matmul``) becomes a
`minflux.runtime.native_runner.loop_words` command: numpy is asked for the strided loop it would call
(``ufunc._resolve_dtypes_and_context`` and ``ufunc._get_strided_loop``, its low-level access to its
loops), and the runner calls that loop as numpy's ufunc call does on its fast
path: once, over every element, for inputs that are 0-d or of the output's shape, contiguous where they
have more than one axis, aligned, of the dtypes numpy resolves for the call (a Python number or a numpy
scalar among them cast once, as numpy casts it), into an ``out`` of the resolved dtype that is one of
the inputs exactly or overlaps none; of floats and booleans only (numpy's integer loops may raise a
Python error from inside, as ``power`` of a negative exponent does). A call numpy would iterate
otherwise stays a Python call. The floating-point flags numpy's error state acts on are checked as for
the runner's own arithmetic: where one was raised, the walk stops and numpy does the call again, which
raises or warns.

>>> import numpy as np
>>> x, out = np.linspace(-1.0, 1.0, 5, dtype=np.float32), np.empty(5, np.float32)
>>> command = loop_command(np.tanh)((x,), {"out": out}, np.geterr())
>>> command.words[4], command.addresses
(5, (5, 6))
>>> loop_command(np.tanh)((x[::-1],), {"out": out}, np.geterr()) is None   # not numpy's fast path
True
"""
from __future__ import annotations

import ctypes
import functools
import math

import numpy as np

from ..runtime import native_runner
from ..runtime.pointers import pointers

__all__ = ["loop_command"]

_CALL_INFO = b"numpy_1.24_ufunc_call_info"


class _CallInfo(ctypes.Structure):
    """numpy's ``ufunc_call_info``, the capsule ``ufunc._get_strided_loop`` fills."""

    _fields_ = [("loop", ctypes.c_void_p), ("context", ctypes.c_void_p), ("auxdata", ctypes.c_void_p),
                ("requires_pyapi", ctypes.c_ubyte), ("no_floatingpoint_errors", ctypes.c_ubyte)]


_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


def _strided_loop(ufunc: np.ufunc, dtypes: tuple, strides: tuple) -> tuple | None:
    """(resolved dtypes, loop, context, auxdata, whether numpy checks its flags, the capsule that keeps
    them) of ``ufunc`` for ``dtypes`` (the inputs' then the output's; ``int``, ``float`` or ``bool`` for
    a Python number) and fixed byte ``strides``, or None where numpy gives none (another numpy, no
    loop, a loop that needs the interpreter). Each command gets its own, as each numpy call does."""
    try:
        resolved, capsule = ufunc._resolve_dtypes_and_context(dtypes)
        ufunc._get_strided_loop(capsule, fixed_strides=strides)
        info = _CallInfo.from_address(_capsule_pointer(capsule, _CALL_INFO))
    except (AttributeError, TypeError, ValueError):
        return None
    if info.requires_pyapi or not info.loop:
        return None
    return resolved, info.loop, info.context, info.auxdata, not info.no_floatingpoint_errors, capsule


def _constant(x, dtype: np.dtype) -> np.ndarray | None:
    """A Python number or numpy scalar as the 0-d array of ``dtype`` numpy's call casts it to (from
    its own dtype: int64, float64 or bool for a Python number), or None where that cast would overflow."""
    value = np.asarray(x)
    if value.dtype.kind not in "biuf" or x.__class__ is int and not -2**63 <= x < 2**63:
        return None
    with np.errstate(all="ignore"):
        cast = value.astype(dtype)
    if dtype.kind in "iu" and cast != value or dtype.kind == "f" and np.isfinite(value) and not np.isfinite(cast):
        return None
    return cast


def _layout(arrays: list, out: np.ndarray) -> tuple | None:
    """The fixed byte strides numpy's fast path gives the inputs ``arrays`` (None for a constant) and
    ``out``, or None where it would not take it."""
    strides, shape = [], out.shape
    for k, x in enumerate((*arrays, out)):
        if x is not None and not x.flags.aligned:
            return None
        if x is None or x.ndim == 0 and k < len(arrays):
            strides.append(0)
        elif x.shape != shape:
            return None
        elif x.ndim == 1:
            if x.strides[0] < 0:
                return None
            strides.append(x.strides[0])
        elif x.flags.c_contiguous:
            strides.append(x.itemsize)
        else:
            return None
    return tuple(strides)


@functools.cache
def loop_command(ufunc: np.ufunc):
    """The command maker (``make(args, kwargs, errstate)``, as `minflux.schedule.native_numpy.COMMANDS`'
    makers) of calls of ``ufunc``, an elementwise ufunc of one or two inputs and one output; None for
    any other."""

    def command(args: tuple, kwargs: dict, errstate: dict) -> native_runner.Command | None:
        nin = ufunc.nin
        out = kwargs.get("out", args[nin] if len(args) == nin + 1 else None)
        if out.__class__ is tuple and len(out) == 1:
            out = out[0]
        if (len(args) not in (nin, nin + 1) or set(kwargs) - {"out"} or len(args) > nin and "out" in kwargs
                or out.__class__ is not np.ndarray or not out.size or not out.flags.writeable):
            return None
        inputs = args[:nin]
        arrays = [x if x.__class__ is np.ndarray else None for x in inputs]
        dtypes = tuple(x.dtype if x.__class__ is np.ndarray or isinstance(x, np.generic) else x.__class__
                       for x in inputs)
        strides = _layout(arrays, out)
        if strides is None or any(d not in (bool, int, float) and not isinstance(d, np.dtype) for d in dtypes):
            return None
        found = _strided_loop(ufunc, (*dtypes, out.dtype), strides)
        if found is None:
            return None
        resolved, loop, context, auxdata, checks, capsule = found
        if resolved[-1] != out.dtype or any(d.kind not in "fb" for d in resolved):
            return None
        operands, held = [], [capsule]
        for x, dtype in zip(inputs, resolved):
            if x.__class__ is np.ndarray:
                if x.dtype != dtype or np.may_share_memory(x, out) and not (
                        x.strides == out.strides and pointers([x]) == pointers([out])):
                    return None
            else:
                x = _constant(x, dtype)
                if x is None:
                    return None
                held.append(x)
            operands.append(x)
        flags = native_runner.fp_flags(errstate) if checks else 0
        if flags is None:
            return None
        return native_runner.loop_words(loop, context, auxdata, math.prod(out.shape), tuple(pointers([*operands, out])),
                                        strides, flags, (ufunc, (*inputs, out)), tuple(held))

    elementwise = ufunc.signature is None   # a generalized ufunc's loop (matmul's) also reads core dimensions
    return command if elementwise and ufunc.nout == 1 and ufunc.nin in (1, 2) else None
