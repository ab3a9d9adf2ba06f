"""One native function that runs a list of commands: kernels, BLAS products, elementwise loops, copies.

A recorded schedule's native segments (`minflux.schedule.native`) are not compiled code of their
own: they are words in an int64 array, which `run` walks in one C call. The commands (a `Command`
each, written by the builders below):

- `kernel_words`: call a compiled kernel with its int64 arguments (its row range, strides and array
  addresses: `minflux.runtime.kernel_loader`);
- `gemm_words`: the row-major ``c = a @ b`` of a CBLAS ``?gemm`` (float32 or float64, 32- or 64-bit
  integers: `GEMM_VARIANTS`);
- `map_words`: ``out = a + b`` (``-``, ``*``, ``/``: `MAP_OPERATIONS`) over rows of float32 or
  float64 elements (``+ - *`` of int64 ones too; `PREDICATES` of floats and `LOGICAL` operations of
  booleans into booleans), an operand read whole or once per row;
- `sum_words`: sums of rows or of columns, in numpy's order;
- `copy_words`: rows of bytes copied, as a concatenation does;
- `loop_words`: numpy's own strided loop of a ufunc (its ``tanh``, ``exp``, ``power``...), called as
  numpy's ufunc call calls it;
- `powers_words`: Adam's bias corrections ``1 - b ** t`` from a step count, as Python computes them;
- `rows_check_words` and `zero_rows_words`: a row mask's count checked, its masked rows zeroed.

A product or an elementwise loop with ``flags`` other than 0 clears the floating-point status flags
before it and tests them after it, as numpy does around its own loops; where one of ``flags`` was
raised, the walk stops and word 0 of the array says at which command, so that the caller does that
command again with numpy, which raises or warns as its error state says.

So one function serves every schedule: nothing is compiled per model, per size or per number of time
steps. It is LLVM IR (`native_runner_ir`) compiled once per machine and cached on disk like any
kernel (`load_runner`). Kernels take only 64-bit integers and pointers, which the C calling
conventions of 64-bit platforms pass alike, so a kernel is called through one type per argument count.

>>> import numpy as np
>>> from minflux.runtime.kernel_loader import load_ir_kernel
>>> ir = '''
... define void @fill(i64 %r0, i64 %r1, i64 %inner, i64 %total, i64 %rows, ptr %p) {
...   store double 7.0, ptr %p
...   ret void
... }'''
>>> fill = load_ir_kernel(ir, "fill", 1)
>>> x = np.zeros(1)
>>> command = kernel_words(function_address(fill.call), [0, 1, 1, 1, 1], [x.ctypes.data])
>>> program = np.array([-1, *command.words], np.int64)
>>> run(program, 1, len(program))
>>> x.tolist(), int(program[0])
([7.0], -1)
"""
from __future__ import annotations

import atexit
import bisect
import ctypes
import os
import platform
import threading
import warnings
from typing import Callable, NamedTuple

import numpy as np

from .native_runner_ir import (COPY, GEMM, GEMM_VARIANTS, GEMM_WORDS, KERNEL, LOGICAL, LOOP, MAP, MAP_DTYPES,
                               MAP_INTEGERS, MAP_OPERATIONS, MAX_KERNEL_ARGUMENTS, POWERS, PREDICATES, ROWS_CHECK, SUM,
                               WORDS_FROM, ZERO_ROWS, map_tag, runner_ir, sum_tag)

__all__ = ["COPY", "Command", "GEMM", "GEMM_VARIANTS", "KERNEL", "LOGICAL", "LOOP", "MAP", "MAP_DTYPES", "MAP_INTEGERS",
           "MAP_OPERATIONS", "MAX_KERNEL_ARGUMENTS", "PREDICATES", "SUM", "command_size", "copy_words", "fp_flags",
           "function_address", "gemm_words", "kernel_words", "load_runner", "loop_words", "map_tag", "map_words",
           "numpy_gemm", "powers_words", "rows_check_words", "run", "runner_ready", "sequence", "sum_words",
           "zero_rows_words"]


class Command(NamedTuple):
    """One command: its ``words``, the positions of the addresses among them, and ``redo``: None, or
    (numpy function, its operands in the order of the addresses, the last its ``out``) for a command
    that computes what that call computes (checked once against its bits; done again by it where the
    floating-point check stops the walk). ``held``: what the words point into (arrays, numpy's loop data),
    kept alive with them.
    ``refresh``: None, or ``(write, reads)`` for a command that reads values from ``held`` cells (a
    numpy scalar a kernel reads has no address of its own): ``write(args, kwargs)``, called with each
    call's arguments before the command runs, writes the cells and returns False where the arguments
    are not of the kinds the command was made for (the call then runs in Python instead);
    ``reads(args, kwargs)`` gives the arguments it writes into cells. ``rows``: 0, or the rows of a
    kernel that computes each row alone (as its launcher splits them over threads), whose row range
    (words 3 and 4) may be cut into shares run at once. ``stops``: where among its words the walk may
    stop for its redo (a command made of several may stop at more than its first). ``shares``: 1, or
    the number of equal commands its words are, which may run at once (a product's shares)."""

    words: list
    addresses: tuple
    redo: tuple | None = None
    held: tuple = ()
    refresh: tuple[Callable, Callable] | None = None
    rows: int = 0
    stops: tuple = (0,)
    shares: int = 1


_lock = threading.Lock()
_FIRST_TAGS = [tag for tag, _ in WORDS_FROM]

# <fenv.h>'s FE_INVALID, FE_DIVBYZERO, FE_OVERFLOW, FE_UNDERFLOW (glibc) by machine
_FE_FLAGS = {"x86_64": (0x01, 0x04, 0x08, 0x10), "AMD64": (0x01, 0x04, 0x08, 0x10),
             "aarch64": (0x01, 0x02, 0x04, 0x08), "arm64": (0x01, 0x02, 0x04, 0x08)}


def fp_flags(errstate: dict) -> int | None:
    """The floating-point status flags numpy acts on under ``errstate`` (``np.geterr()``'s form), or
    None where their values on this machine are not known.

    >>> fp_flags({"divide": "ignore", "over": "ignore", "under": "ignore", "invalid": "ignore"})
    0
    """
    flags = _FE_FLAGS.get(platform.machine()) if os.name == "posix" else None
    if flags is None:
        return None
    names = ("invalid", "divide", "over", "under")
    return sum(f for f, name in zip(flags, names) if errstate.get(name, "ignore") != "ignore")


def function_address(function) -> int:
    """The address of a ctypes function (a loaded kernel's ``call``).

    >>> function_address(ctypes.CFUNCTYPE(None)(lambda: None)) > 0
    True
    """
    return ctypes.cast(function, ctypes.c_void_p).value


def kernel_words(function: int, integers: list, addresses: list) -> Command:
    """A kernel called with ``integers`` then ``addresses``.

    >>> kernel_words(1234, [0, 1], [5678]).words, kernel_words(1234, [0, 1], [5678]).addresses
    ([0, 1234, 3, 0, 1, 5678], (5,))
    """
    n = len(integers) + len(addresses)
    return Command([KERNEL, function, n, *integers, *addresses], tuple(range(3 + len(integers), 3 + n)))


def gemm_words(variant: int, function: int, trans_a: int, trans_b: int, m: int, n: int, k: int,
               a: int, lda: int, b: int, ldb: int, c: int, ldc: int, flags: int, redo: tuple) -> Command:
    """``c = a @ b`` by CBLAS ``function`` (`GEMM_VARIANTS[variant]`), the arguments as CBLAS names them.

    >>> gemm_words(0, 1234, 111, 111, 2, 3, 4, 10, 4, 20, 3, 30, 3, 0, None).addresses
    (7, 9, 11)
    """
    return Command([GEMM + variant, function, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, flags],
                   (7, 9, 11), redo)


def map_words(op: int, dtype, rows: int, cols: int, a: tuple, b: tuple, out: tuple, flags: int, redo: tuple,
              held: tuple = ()) -> Command:
    """``out = a <op> b`` over ``rows`` rows of ``cols`` elements: ``a``, ``b`` and ``out`` are (address,
    bytes between rows, elements between columns: 1, or 0 for an operand read once per row).

    >>> x, y, out = np.ones((2, 3)), np.full(3, 2.0), np.empty((2, 3))
    >>> command = map_words(0, np.float64, 2, 3, (x.ctypes.data, 24, 1), (y.ctypes.data, 0, 1),
    ...                     (out.ctypes.data, 24, 1), 0, None)
    >>> run(np.array([-1, *command.words], np.int64), 1, 1 + len(command.words)); out.tolist()
    [[3.0, 3.0, 3.0], [3.0, 3.0, 3.0]]
    """
    pattern = (a[2] == 0) + 2 * (b[2] == 0)
    return Command([map_tag(op, dtype, pattern), 0, rows, cols, a[0], a[1], b[0], b[1], out[0], out[1], flags],
                   (4, 6, 8), redo, held)


def sum_words(by_columns: bool, dtype, rows: int, cols: int, a: tuple, out: tuple, flags: int, redo: tuple) -> Command:
    """The sums of ``rows`` rows of ``cols`` contiguous elements, as numpy's ``add.reduce`` sums them:
    of each row into an element of ``out`` (pairwise), or of each column into ``out`` (in order of
    the rows). ``a`` is (address, bytes between rows), ``out`` (address, bytes between row sums).

    >>> x, out = np.arange(6.0).reshape(2, 3), np.empty(2)
    >>> command = sum_words(False, np.float64, 2, 3, (x.ctypes.data, 24), (out.ctypes.data, 8), 0, None)
    >>> run(np.array([-1, *command.words], np.int64), 1, 1 + len(command.words)); out.tolist()
    [3.0, 12.0]
    """
    return Command([sum_tag(by_columns, dtype), 0, rows, cols, a[0], a[1], out[0], out[1], flags], (4, 6), redo)


def powers_words(dtype, count: int, bases: tuple, out: int, redo: tuple | None = None) -> Command:
    """``out[k] = 1.0 - bases[k] ** t`` rounded to ``dtype`` (float32 or float64) for ``k`` 0 and 1, ``t``
    the int64 at address ``count``: the bits of Python's ``dtype.type(1.0 - b ** int(t))`` (both call
    the C library's ``pow``). Where Python would raise (a negative ``t``, an overflow) the walk stops at
    it, for ``redo`` (as for `map_words`) to raise as Python does.

    >>> t, out = np.array(3), np.empty(2, np.float32)
    >>> command = powers_words(np.float32, t.ctypes.data, (0.5, 0.9), out.ctypes.data)
    >>> run(np.array([-1, *command.words], np.int64), 1, 1 + len(command.words)); out.tolist() == [
    ...     np.float32(1.0 - 0.5 ** 3), np.float32(1.0 - 0.9 ** 3)]
    True
    """
    bits = np.array(bases, np.float64).view(np.int64)
    return Command([POWERS + MAP_DTYPES.index(np.dtype(dtype)), 0, count, int(bits[0]), int(bits[1]), out], (2, 5),
                   redo)


def rows_check_words(keep: int, rows: int, least: int) -> Command:
    """Stop the walk here where at least ``least`` of the ``rows`` bytes at address ``keep`` (a
    boolean mask) are 0 (``least`` 0: always).

    >>> keep = np.array([True, False, False])
    >>> programs = [np.array([-1, *rows_check_words(keep.ctypes.data, 3, n).words]) for n in (2, 3)]
    >>> [run(p, 1, len(p)) or int(p[0]) for p in programs]    # stopped at word 1; went on
    [1, -1]
    """
    return Command([ROWS_CHECK, 0, keep, rows, least], (2,))


def zero_rows_words(keep: int, rows: int, out: tuple, size: int) -> Command:
    """Zero the first ``size`` bytes of each row ``r`` of ``rows`` whose byte ``r`` at address ``keep``
    (a boolean mask) is 0; ``out`` is (address, bytes between rows).

    >>> keep, out = np.array([True, False]), np.ones((2, 3))
    >>> command = zero_rows_words(keep.ctypes.data, 2, (out.ctypes.data, 24), 16)
    >>> run(np.array([-1, *command.words], np.int64), 1, 1 + len(command.words)); out.tolist()
    [[1.0, 1.0, 1.0], [0.0, 0.0, 1.0]]
    """
    return Command([ZERO_ROWS, 0, keep, rows, out[0], out[1], size], (2, 4))


def loop_words(loop: int, context: int, auxdata: int, count: int, operands: tuple, strides: tuple, flags: int,
               redo: tuple, held: tuple = ()) -> Command:
    """numpy's strided ``loop`` (``int loop(context, data, dimensions, strides, auxdata)``) over ``count``
    elements of ``operands`` (addresses: the inputs, then the output) ``strides`` bytes apart, its
    ``flags`` checked as for `map_words`; a status other than 0 stops the walk too.

    >>> import ctypes
    >>> status = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 5)(lambda *a: 0)
    >>> command = loop_words(function_address(status), 0, 0, 4, (10, 20), (8, 8), 0, None)
    >>> command.words[4:], command.addresses
    ([4, 10, 20, 0, 8, 8, 0, 0], (5, 6))
    """
    pad = (0,) * (3 - len(operands))
    return Command([LOOP, loop, context, auxdata, count, *operands, *pad, *strides, *pad, flags],
                   tuple(range(5, 5 + len(operands))), redo, held)


def copy_words(rows: int, size: int, src: tuple, dst: tuple) -> Command:
    """``rows`` rows of ``size`` bytes copied: ``src`` and ``dst`` are (address, bytes between rows).

    >>> src, dst = np.arange(4.0).reshape(2, 2), np.zeros((2, 3))
    >>> command = copy_words(2, 16, (src.ctypes.data, 16), (dst.ctypes.data + 8, 24))
    >>> run(np.array([-1, *command.words], np.int64), 1, 1 + len(command.words)); dst.tolist()
    [[0.0, 0.0, 1.0], [0.0, 2.0, 3.0]]
    """
    return Command([COPY, 0, rows, size, src[0], src[1], dst[0], dst[1]], (4, 6))


def sequence(*commands: Command) -> Command:
    """``commands`` one after the other, as one command (their words and addresses; nothing else).

    >>> sequence(copy_words(1, 8, (10, 0), (20, 0)), copy_words(1, 8, (30, 0), (40, 0))).addresses
    (4, 6, 12, 14)
    """
    words, addresses = [], []
    for command in commands:
        addresses += [len(words) + p for p in command.addresses]
        words += command.words
    return Command(words, tuple(addresses))


def command_size(program: np.ndarray, at: int) -> int:
    """The number of words of the command at word ``at`` of ``program``.

    >>> command_size(np.array([-1, *copy_words(1, 8, (0, 0), (0, 0)).words]), 1)
    8
    """
    tag = int(program[at])
    if tag == KERNEL:
        return 3 + int(program[at + 2])
    return WORDS_FROM[bisect.bisect_right(_FIRST_TAGS, tag) - 1][1]


# -- numpy's own BLAS ----------------------------------------------------------------------------------
_numpy_gemm: dict | None = None
_NUMPY_SYMBOLS = (("scipy_cblas_{}gemm64_", 64), ("cblas_{}gemm64_", 64), ("scipy_cblas_{}gemm", 32),
                  ("cblas_{}gemm", 32))


def _blas_libraries() -> list:
    """The BLAS libraries numpy ships (the ``numpy.libs`` folder of its wheel), loaded in this process."""
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [os.path.join(folder, n) for n in names if "blas" in n.lower() and ".so" in n]


def numpy_gemm(dtype) -> tuple | None:
    """(address, integer width) of the CBLAS ``?gemm`` numpy's ``matmul`` calls for ``dtype``, or None
    where it cannot be found (numpy built against another BLAS, or on another platform). A product
    handed to it is checked once against ``np.matmul``'s bits before a schedule uses it.

    >>> found = numpy_gemm(np.float32)
    >>> found is None or found[1] in (32, 64)
    True
    """
    global _numpy_gemm
    if _numpy_gemm is None:
        _numpy_gemm = {}
        for path in _blas_libraries():
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            for letter, kind in (("s", np.float32), ("d", np.float64)):
                for pattern, width in _NUMPY_SYMBOLS:
                    address = getattr(library, pattern.format(letter), None)
                    if address is not None and np.dtype(kind) not in _numpy_gemm:
                        _numpy_gemm[np.dtype(kind)] = (function_address(address), width)
    return _numpy_gemm.get(np.dtype(dtype))


_runner = None
_loading: threading.Thread | None = None


def load_runner():
    """The runner as a ctypes function ``(first word, end word, 0, 0, 0, address of the words)``:
    compiled on first use (a second or two, once per machine) and cached on disk.

    >>> function_address(load_runner()) > 0
    True
    """
    global _runner
    if _runner is None:
        from .kernel_loader import load_ir_kernel

        _runner = load_ir_kernel(runner_ir(), "minflux_run", 1, generator="native_runner 4", private=True).call
    return _runner


def runner_ready() -> bool:
    """Whether the runner is loaded; the first call that finds it not loaded starts loading it on a
    thread of its own, so that no caller waits for its compiler. A runner that cannot be compiled
    here is reported once, as a warning, and never ready.

    >>> load_runner() is not None and runner_ready()
    True
    """
    global _loading
    if _runner is not None:
        return True
    with _lock:
        if _loading is None:
            _loading = threading.Thread(target=_load_in_background, name="minflux native runner", daemon=True)
            _loading.start()
            atexit.register(_loading.join)   # LLVM's state is torn down as the process ends: not under a compile
    return False


def _load_in_background() -> None:
    try:
        load_runner()
    except Exception as error:   # noqa: BLE001 (reported, and the Python replay goes on)
        warnings.warn(f"minflux could not compile its native runner ({error}); compiled steps replay in "
                      "Python", RuntimeWarning, stacklevel=1)


def run(program: np.ndarray, first: int, end: int) -> None:
    """Run the commands of ``program`` (an int64 array whose word 0 is -1) from word ``first`` to
    word ``end``; word 0 then holds -1, or the word of a product whose floating-point check failed."""
    load_runner()(first, end, 0, 0, 0, program.ctypes.data)
