"""One native function that runs a list of commands: compiled kernels and BLAS products, no Python between.

A recorded schedule's native segments (`minflux.schedule.native`) are not compiled code of their
own: they are words in an int64 array, which `run` walks in one C call. A command is

- ``KERNEL, function, n, a_0 ... a_(n-1)``: call a compiled kernel with its ``n`` int64 arguments
  (its row range, strides and array addresses: `minflux.runtime.kernel_loader`);
- ``GEMM + variant, function, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, flags``: the row-major
  ``c = a @ b`` of a CBLAS ``?gemm`` (float32 or float64, 32- or 64-bit integers: `GEMM_VARIANTS`).
  When ``flags`` is not 0 the floating-point status flags are cleared before the call and tested
  after it, as numpy does around its ``matmul``; if any of ``flags`` is raised, the walk stops and
  word 0 of the array says at which command, so that the caller can redo that product in Python where
  numpy raises or warns as its error state says.

So one function serves every schedule: nothing is compiled per model, per size or per number of time
steps. It is LLVM IR compiled once per machine and cached on disk like any kernel (`load_runner`).
Kernels take only 64-bit integers and pointers, which the C calling conventions of 64-bit platforms
pass alike, so a kernel is called through one type per argument count.

>>> import numpy as np
>>> from minflux.runtime.kernel_loader import load_ir_kernel
>>> ir = '''
... define void @fill(i64 %r0, i64 %r1, i64 %inner, i64 %total, i64 %rows, ptr %p) {
...   store double 7.0, ptr %p
...   ret void
... }'''
>>> fill = load_ir_kernel(ir, "fill", 1)
>>> x = np.zeros(1)
>>> words, _ = kernel_words(function_address(fill.call), [0, 1, 1, 1, 1], [x.ctypes.data])
>>> program = np.array([-1, *words], np.int64)
>>> run(program, 1, len(program))
>>> x.tolist(), int(program[0])
([7.0], -1)
"""
from __future__ import annotations

import ctypes
import os
import platform

import numpy as np

__all__ = ["GEMM", "GEMM_OUT", "GEMM_VARIANTS", "GEMM_WORDS", "KERNEL", "MAX_KERNEL_ARGUMENTS", "fp_flags",
           "function_address", "gemm_words", "kernel_words", "load_runner", "numpy_gemm", "run"]

KERNEL, GEMM = 0, 1
GEMM_VARIANTS = ((np.dtype(np.float32), 32), (np.dtype(np.float32), 64),
                 (np.dtype(np.float64), 32), (np.dtype(np.float64), 64))
"""(dtype, integer width) of ``GEMM + i``: ``cblas_sgemm`` or ``cblas_dgemm`` with 32- or 64-bit ints."""
GEMM_WORDS = 14
MAX_KERNEL_ARGUMENTS = 96
"""The most arguments a kernel command may pass (the widest elementwise kernels stay Python calls)."""

_ROW_MAJOR = 101

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
    """The address of a ctypes function (a loaded kernel's ``call``)."""
    return ctypes.cast(function, ctypes.c_void_p).value


def kernel_words(function: int, integers: list, addresses: list) -> tuple[list, range]:
    """(the words of one kernel command, the positions of its addresses among them)."""
    n = len(integers) + len(addresses)
    return [KERNEL, function, n, *integers, *addresses], range(3 + len(integers), 3 + n)


GEMM_OUT = 11
"""The position of the result's address among a product command's words."""


def gemm_words(variant: int, function: int, trans_a: int, trans_b: int, m: int, n: int, k: int,
               a: int, lda: int, b: int, ldb: int, c: int, ldc: int, flags: int) -> tuple[list, tuple]:
    """(the words of one product command, the positions of its three addresses among them)."""
    return [GEMM + variant, function, trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, flags], (7, 9, GEMM_OUT)


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
    handed to it is checked once against ``np.matmul``'s bits before a schedule uses it."""
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


# -- the runner ----------------------------------------------------------------------------------------
def _word(at: str, offset: int, name: str, lines: list) -> str:
    lines.append(f"  %{name}.at = add i64 {at}, {offset}")
    lines.append(f"  %{name}.p = getelementptr i64, ptr %p, i64 %{name}.at")
    lines.append(f"  %{name} = load i64, ptr %{name}.p")
    return f"%{name}"


def runner_ir() -> str:
    """The LLVM IR of the runner: ``minflux_run(first word, end word, 0, 0, 0, words)``."""
    lines = ["declare i32 @feclearexcept(i32)", "declare i32 @fetestexcept(i32)", "",
             "define void @minflux_run(i64 %r0, i64 %r1, i64 %inner, i64 %total, i64 %rows, ptr %p) {",
             "entry:", "  %any = icmp slt i64 %r0, %r1", "  br i1 %any, label %loop, label %done", "loop:"]
    nexts = [f"[%next.k{n}, %k{n}]" for n in range(MAX_KERNEL_ARGUMENTS + 1)]
    nexts += [f"[%next.g{v}, %g{v}.ok]" for v in range(len(GEMM_VARIANTS))]
    lines.append(f"  %pc = phi i64 [%r0, %entry], {', '.join(nexts)}")
    lines.append("  %tag.p = getelementptr i64, ptr %p, i64 %pc")
    lines.append("  %tag = load i64, ptr %tag.p")
    fn = _word("%pc", 1, "fn.word", lines)
    lines.append(f"  %fn = inttoptr i64 {fn} to ptr")
    cases = " ".join([f"i64 {KERNEL}, label %kernel"] +
                     [f"i64 {GEMM + v}, label %g{v}" for v in range(len(GEMM_VARIANTS))])
    lines.append(f"  switch i64 %tag, label %done [{cases}]")
    lines.append("kernel:")
    count = _word("%pc", 2, "n", lines)
    lines.append(f"  switch i64 {count}, label %done [" +
                 " ".join(f"i64 {n}, label %k{n}" for n in range(MAX_KERNEL_ARGUMENTS + 1)) + "]")
    for n in range(MAX_KERNEL_ARGUMENTS + 1):
        lines.append(f"k{n}:")
        args = [_word("%pc", 3 + i, f"k{n}.a{i}", lines) for i in range(n)]
        lines.append(f"  call void %fn({', '.join('i64 ' + a for a in args)})")
        lines.append(f"  %next.k{n} = add i64 %pc, {3 + n}")
        lines.append(f"  %more.k{n} = icmp slt i64 %next.k{n}, %r1")
        lines.append(f"  br i1 %more.k{n}, label %loop, label %done")
    for v, (dtype, width) in enumerate(GEMM_VARIANTS):
        scalar = "float" if dtype == np.float32 else "double"
        integer = f"i{width}"
        lines.append(f"g{v}:")
        words = [_word("%pc", 2 + i, f"g{v}.w{i}", lines) for i in range(GEMM_WORDS - 2)]
        ints = []
        for i, w in enumerate(words[:-1]):
            if i in (5, 7, 9):   # the pointers
                ints.append(f"ptr %g{v}.ptr{i}")
                lines.append(f"  %g{v}.ptr{i} = inttoptr i64 {w} to ptr")
            elif width == 32:
                lines.append(f"  %g{v}.i{i} = trunc i64 {w} to i32")
                ints.append(f"i32 %g{v}.i{i}")
            else:
                ints.append(f"i64 {w}")
        flags = words[-1]
        lines.append(f"  %g{v}.flags = trunc i64 {flags} to i32")
        lines.append(f"  %g{v}.check = icmp ne i32 %g{v}.flags, 0")
        lines.append(f"  br i1 %g{v}.check, label %g{v}.clear, label %g{v}.call")
        lines.append(f"g{v}.clear:")
        lines.append(f"  %g{v}.c = call i32 @feclearexcept(i32 %g{v}.flags)")
        lines.append(f"  br label %g{v}.call")
        lines.append(f"g{v}.call:")
        ta, tb, m, n, k, a, lda, b, ldb, c, ldc = ints
        one, zero = f"{scalar} 1.0", f"{scalar} 0.0"
        lines.append(f"  call void %fn({integer} {_ROW_MAJOR}, {ta}, {tb}, {m}, {n}, {k}, {one}, {a}, {lda}, "
                     f"{b}, {ldb}, {zero}, {c}, {ldc})")
        lines.append(f"  br i1 %g{v}.check, label %g{v}.test, label %g{v}.ok")
        lines.append(f"g{v}.test:")
        lines.append(f"  %g{v}.raised = call i32 @fetestexcept(i32 %g{v}.flags)")
        lines.append(f"  %g{v}.clean = icmp eq i32 %g{v}.raised, 0")
        lines.append(f"  br i1 %g{v}.clean, label %g{v}.ok, label %g{v}.stop")
        lines.append(f"g{v}.stop:")
        lines.append("  store i64 %pc, ptr %p")
        lines.append("  ret void")
        lines.append(f"g{v}.ok:")
        lines.append(f"  %next.g{v} = add i64 %pc, {GEMM_WORDS}")
        lines.append(f"  %more.g{v} = icmp slt i64 %next.g{v}, %r1")
        lines.append(f"  br i1 %more.g{v}, label %loop, label %done")
    lines += ["done:", "  ret void", "}"]
    return "\n".join(lines) + "\n"


_runner = None


def load_runner():
    """The runner as a ctypes function ``(first word, end word, 0, 0, 0, address of the words)``:
    compiled on first use (about a second) and cached on disk."""
    global _runner
    if _runner is None:
        from .kernel_loader import load_ir_kernel

        _runner = load_ir_kernel(runner_ir(), "minflux_run", 1, generator="native_runner 1").call
    return _runner


def run(program: np.ndarray, first: int, end: int) -> None:
    """Run the commands of ``program`` (an int64 array whose word 0 is -1) from word ``first`` to
    word ``end``; word 0 then holds -1, or the word of a product whose floating-point check failed."""
    load_runner()(first, end, 0, 0, 0, program.ctypes.data)
