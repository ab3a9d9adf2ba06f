"""numpy operations of a recorded schedule as native commands: elementwise arithmetic, sums, concatenation.

`COMMANDS` maps ``np.add``, ``np.subtract``, ``np.multiply``, ``np.true_divide``, ``np.positive``,
``np.concatenate``, ``np.stack``, ``np.sum``, ``ndarray.sum``, ``np.mean`` and ``np.ones_like`` (and
``np.zeros_like``: constant bytes copied into their new array) to the function that gives a call's
`minflux.runtime.native_runner.Command`, or None where the call is not one the runner does as numpy
does. Arithmetic qualifies on float32 or float64 arrays of the result's dtype (or Python numbers,
converted to it as numpy converts them) whose elements are read whole or once per row, written into
an ``out`` that overlaps no operand except as that very operand (checked in place, the result goes
to a scratch array first and over the operand once the check passed, so that a check that fails
leaves numpy the operands to start again). IEEE arithmetic rounds each element the same way in any
loop, so the bits are numpy's (a NaN's payload aside, where both operands are NaN), and numpy's
floating-point checks are kept (`native_runner`); ``+ - *`` of int64 arrays (or Python ints
that fit) wrap around as numpy's do. A concatenation qualifies when every array and
``out`` are C-contiguous of one dtype: it is a copy of rows (a stack is the concatenation of its
arrays, each with a new axis where it stacks them); so is ``np.positive`` of a float array with
contiguous rows into ``out`` of its dtype (a float's unary plus changes no bit). A sum (``np.sum`` or
``ndarray.sum``) qualifies over the leading or the trailing axes of a C-contiguous float32 or float64
array, or over all of them: numpy sums across its inner loop in order and along it pairwise, and the
runner does the same (checked once against numpy's bits at the probe, like the arithmetic); so does
``np.mean``, that sum divided by the count.

>>> import numpy as np
>>> a, b, out = np.ones((2, 3), np.float32), np.ones(3, np.float32), np.empty((2, 3), np.float32)
>>> COMMANDS[np.add]((a, b), {"out": out}, np.geterr()).words[2:4]
[2, 3]
>>> len(COMMANDS[np.concatenate](([a, a],), {"axis": 1, "out": np.empty((2, 6), np.float32)}, {}).words)
16
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..runtime import native_runner
from ..runtime.native_runner import Command, MAP_DTYPES, MAP_INTEGERS, copy_words, map_words, sequence
from ..runtime.pointers import pointers
from .traced import _method_caller

__all__ = ["COMMANDS"]


def _rows(x: np.ndarray, shape: tuple) -> tuple | None:
    """(bytes between rows, elements between columns) of ``x`` broadcast to ``shape`` seen as rows of its
    last axis, or None where its elements are not so laid out."""
    try:
        b = np.broadcast_to(x, shape)
    except ValueError:
        return None
    strides, size = b.strides, b.itemsize
    if not shape:
        return 0, 0
    inner = strides[-1]
    if inner not in (0, size) and shape[-1] > 1:
        return None
    for i in range(len(shape) - 2):   # the outer axes must merge into one
        if shape[i] > 1 and strides[i] != strides[i + 1] * shape[i + 1]:
            return None
    return (strides[-2] if len(shape) > 1 else 0), (1 if inner and shape[-1] > 1 else 0)


def _map_command(op):
    """The command maker of ``MAP_OPERATIONS[op]``, or of ``op`` itself, a ufunc of `PREDICATES` (floats
    compared into booleans) or `LOGICAL` (of booleans)."""
    fn = op if op.__class__ is np.ufunc else native_runner.MAP_OPERATIONS[op][1]
    logical = any(fn is f for _, f in native_runner.LOGICAL)
    boolean = logical or any(fn is f for _, f in native_runner.PREDICATES)

    def command(args: tuple, kwargs: dict, errstate: dict) -> Command | None:
        out = kwargs.get("out", args[2] if len(args) == 3 else None)
        if out.__class__ is tuple and len(out) == 1:
            out = out[0]
        if (len(args) not in (2, 3) or set(kwargs) - {"out"} or out.__class__ is not np.ndarray or not out.size
                or not out.flags.writeable or not (out.dtype == np.bool_ if boolean else
                                                   out.dtype in MAP_DTYPES or out.dtype in MAP_INTEGERS and op < 3)):
            return None
        dtype, shape = out.dtype, out.shape
        if boolean and not logical:   # compared in the arrays' float dtype
            dtype = next((x.dtype for x in args[:2] if x.__class__ is np.ndarray), None)
            if dtype not in MAP_DTYPES:
                return None
        integer = dtype.kind == "i"
        operands, held, redo = [], [], []
        for x in args[:2]:
            if x.__class__ is np.ndarray and x.dtype == dtype:
                operands.append(x)
            elif (x.__class__ is bool if logical else
                  x.__class__ is int and np.iinfo(dtype).min <= x <= np.iinfo(dtype).max if integer
                  else x.__class__ in (float, int)) or isinstance(x, np.generic) and x.dtype == dtype:
                operands.append(np.array(x, dtype))   # a Python number as numpy converts it
                held.append(operands[-1])
            else:
                return None
            redo.append(x)
        laid = [_rows(x, shape) for x in operands]
        written = _rows(out, shape)
        flags = 0 if integer or logical else native_runner.fp_flags(errstate)
        if None in laid or written is None or written[1] != 1 and shape and shape[-1] > 1 or flags is None:
            return None
        in_place = False
        for x in operands:
            if np.may_share_memory(x, out):
                if not (x.shape == shape and x.strides == out.strides and pointers([x]) == pointers([out])):
                    return None
                in_place = True
        rows, cols = (math.prod(shape[:-1]), shape[-1]) if shape else (1, 1)
        (pa, pb, po) = pointers([*operands, out])
        if not (in_place and flags):
            return map_words(op, dtype, rows, cols, (pa, *laid[0]), (pb, *laid[1]), (po, written[0], 1), flags,
                             (fn, (*redo, out)), tuple(held))
        # checked in place: into a scratch array, copied over the operand only once the check passed,
        # so that numpy can do the call again from its operands
        scratch = np.empty((rows, cols), dtype)
        row = cols * out.itemsize
        into = map_words(op, dtype, rows, cols, (pa, *laid[0]), (pb, *laid[1]), (scratch.ctypes.data, row, 1), flags,
                         (fn, (*redo, out)), (*held, scratch))
        both = sequence(into, copy_words(rows, row, (scratch.ctypes.data, row), (po, written[0])))
        a, b, written_to, src, dst = both.addresses
        return into._replace(words=both.words, addresses=(a, b, dst, written_to, src))   # as its redo lists them

    return command


def _concatenate_command(args: tuple, kwargs: dict, errstate: dict) -> Command | None:
    if not args or len(args) > 2 or set(kwargs) - {"axis", "out"}:
        return None
    arrays, out = args[0], kwargs.get("out")
    axis = kwargs.get("axis", args[1] if len(args) == 2 else 0)
    if out.__class__ is not np.ndarray or not out.flags.c_contiguous or axis.__class__ is not int or not out.ndim:
        return None
    if not all(x.__class__ is np.ndarray and x.dtype == out.dtype and x.ndim == out.ndim and x.flags.c_contiguous
               for x in arrays):
        return None
    axis = axis % out.ndim
    rows, row = math.prod(out.shape[:axis]), math.prod(out.shape[axis:]) * out.itemsize
    copies, offset = [], 0
    *sources, destination = pointers([*arrays, out])
    for x, address in zip(arrays, sources):
        size = math.prod(x.shape[axis:]) * x.itemsize
        if size and rows:
            copies.append(copy_words(rows, size, (address, size), (destination + offset, row)))
        offset += size
    if offset != row or not copies:
        return None
    return sequence(*copies)


def _stack_command(args: tuple, kwargs: dict, errstate: dict) -> Command | None:
    """``np.stack(arrays, axis, out=out)``: the concatenation of the arrays, each with a new axis there."""
    if not args or len(args) > 2 or set(kwargs) - {"axis", "out"} or args[0].__class__ not in (list, tuple):
        return None
    axis, out = kwargs.get("axis", args[1] if len(args) == 2 else 0), kwargs.get("out")
    if axis.__class__ is not int or out.__class__ is not np.ndarray or not -out.ndim <= axis < out.ndim or \
            any(x.__class__ is not np.ndarray or x.ndim != out.ndim - 1 for x in args[0]):
        return None
    return _concatenate_command(([np.expand_dims(x, axis) for x in args[0]],), {"axis": axis, "out": out}, errstate)


_SUM_MAX_COLUMNS = 8192   # numpy's reduction buffer: longer rows may be summed in pieces
_DIVIDE = [fn for _, fn in native_runner.MAP_OPERATIONS].index(np.true_divide)


def _sum_command(args: tuple, kwargs: dict, errstate: dict) -> Command | None:
    """``a.sum(axis=..., keepdims=..., out=out)`` (or ``np.sum``) over the leading or the trailing axes of
    a C-contiguous float array: its columns summed in order of the rows, or its rows pairwise (all of
    it as one row, from numpy's identity 0, where every axis is summed)."""
    out, axis = kwargs.get("out"), kwargs.get("axis")
    if len(args) != 1 or set(kwargs) - {"axis", "keepdims", "out"} or out.__class__ is not np.ndarray:
        return None
    a = args[0]
    if (a.__class__ is not np.ndarray or a.dtype not in MAP_DTYPES or out.dtype != a.dtype or not a.flags.c_contiguous
            or not out.flags.c_contiguous or not out.flags.writeable or np.may_share_memory(a, out)):
        return None
    axes = sorted({x % a.ndim for x in (axis if axis.__class__ is tuple else (axis,))}) if axis is not None else \
        list(range(a.ndim))
    k = len(axes)
    if not k or axes not in (list(range(k)), list(range(a.ndim - k, a.ndim))):
        return None
    by_columns, whole = axes[0] == 0 and k < a.ndim, k == a.ndim
    rows, cols = (math.prod(a.shape[:k]), math.prod(a.shape[k:])) if by_columns else \
        (math.prod(a.shape[:a.ndim - k]), math.prod(a.shape[a.ndim - k:]))
    flags = native_runner.fp_flags(errstate)
    if (rows < 2 or cols < 2) and not whole or (not by_columns and cols > _SUM_MAX_COLUMNS) or flags is None or \
            out.size != (cols if by_columns else rows) or not a.size:
        return None
    pa, po = pointers([a, out])
    caller = _method_caller("sum")
    return native_runner.sum_words(by_columns, a.dtype, rows, cols, (pa, cols * a.itemsize), (po, a.itemsize), flags,
                                   (functools.partial(caller, **{n: kwargs[n] for n in ("axis", "keepdims")
                                                                 if n in kwargs}), (a, out)))


def _mean_command(args: tuple, kwargs: dict, errstate: dict) -> Command | None:
    """``np.mean(a, axis=..., keepdims=..., out=out)`` where `_sum_command` sums: the sum into a scratch
    array, then divided by the count in the array's dtype. numpy divides in float64 and rounds to the
    dtype, which for float32 is the same single rounding (float64 carries more than twice float32's
    digits), so the bits are numpy's while the count is exact in the dtype."""
    out = kwargs.get("out")
    if len(args) != 1 or out.__class__ is not np.ndarray or not out.flags.c_contiguous or not out.size:
        return None
    scratch = np.empty(out.shape, out.dtype)
    summed = _sum_command(args, {**kwargs, "out": scratch}, errstate)
    count = args[0].size // out.size
    if summed is None or count >= 2 ** (np.finfo(out.dtype).nmant + 1):
        return None
    held = np.array(count, out.dtype)
    ps, pc, po = pointers([scratch, held, out])
    divide = map_words(_DIVIDE, out.dtype, 1, out.size, (ps, 0, 1), (pc, 0, 0), (po, 0, 1), summed.words[-1], None)
    both = sequence(summed, divide)
    redo = functools.partial(np.mean, **{n: kwargs[n] for n in ("axis", "keepdims") if n in kwargs})
    return both._replace(redo=(redo, (args[0], out)), held=(scratch, held), stops=(0, len(summed.words)))


def _positive_command(args: tuple, kwargs: dict, errstate: dict) -> Command | None:
    """``np.positive(x, out=out)`` of a float array whose rows are contiguous, into a C-contiguous ``out``
    of its dtype: a copy of rows of bytes (a float's unary plus changes no bit)."""
    out = kwargs.get("out")
    if out.__class__ is tuple and len(out) == 1:
        out = out[0]
    if (len(args) != 1 or set(kwargs) - {"out", "dtype", "order"} or out.__class__ is not np.ndarray
            or not out.flags.c_contiguous or not out.flags.writeable or not out.size or out.dtype not in MAP_DTYPES):
        return None
    x = args[0]
    if x.__class__ is not np.ndarray or x.dtype != out.dtype or kwargs.get("dtype", x.dtype) != x.dtype or \
            np.may_share_memory(x, out):
        return None
    laid = _rows(x, out.shape)
    if laid is None or laid[1] != 1 and out.shape[-1] > 1:
        return None
    cols = out.shape[-1] if out.ndim else 1
    row = cols * out.itemsize
    pa, po = pointers([x, out])
    return copy_words(out.size // cols, row, (pa, laid[0]), (po, row))


def _filled_command(value):
    """The command maker of ``np.ones_like(x)`` (``value`` 1) or ``np.zeros_like(x)`` (0) into the
    C-contiguous array the call made (``out``, `minflux.schedule.native_probe` gives it): the bytes of
    that array numpy made, copied from a constant array."""

    def command(args: tuple, kwargs: dict, errstate: dict) -> Command | None:
        out = kwargs.get("out")
        if len(args) != 1 or set(kwargs) != {"out"} or out.__class__ is not np.ndarray or \
                not out.flags.c_contiguous or not out.nbytes:
            return None
        constant = np.full_like(out, value)
        source, destination = pointers([constant, out])
        return copy_words(1, out.nbytes, (source, 0), (destination, 0))._replace(held=(constant,))

    return command


COMMANDS = {fn: _map_command(op) for op, (_, fn) in enumerate(native_runner.MAP_OPERATIONS)}
COMMANDS.update((fn, _map_command(fn)) for _, fn in (*native_runner.PREDICATES, *native_runner.LOGICAL))
COMMANDS[np.positive] = _positive_command
COMMANDS[np.concatenate] = _concatenate_command
COMMANDS[np.stack] = _stack_command
COMMANDS[_method_caller("sum")] = COMMANDS[np.sum] = _sum_command
COMMANDS[np.mean] = _mean_command
COMMANDS[np.ones_like] = _filled_command(1)
COMMANDS[np.zeros_like] = _filled_command(0)
