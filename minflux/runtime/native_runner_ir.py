"""The LLVM IR of the native runner (`minflux.runtime.native_runner`): one function, a block per command.

The function walks the words of a program from a first to an end word. Each command's block reads
its words, does its work and goes on to the next command; a command's words are laid out as the
builders in `native_runner` write them, and start with its tag (the constants here).

>>> "define void @minflux_run(" in runner_ir()
True
"""
from __future__ import annotations

import numpy as np

__all__ = ["COPY", "COPY_WORDS", "GEMM", "GEMM_VARIANTS", "GEMM_WORDS", "KERNEL", "MAP", "MAP_DTYPES",
           "MAP_OPERATIONS", "MAP_WORDS", "MAX_KERNEL_ARGUMENTS", "map_tag", "runner_ir"]

KERNEL, GEMM, COPY, MAP = 0, 1, 5, 6
GEMM_VARIANTS = ((np.dtype(np.float32), 32), (np.dtype(np.float32), 64),
                 (np.dtype(np.float64), 32), (np.dtype(np.float64), 64))
"""(dtype, integer width) of ``GEMM + i``: ``cblas_sgemm`` or ``cblas_dgemm`` with 32- or 64-bit ints."""
MAP_OPERATIONS = (("fadd", np.add), ("fsub", np.subtract), ("fmul", np.multiply), ("fdiv", np.true_divide))
"""(LLVM instruction, the numpy ufunc it is) of ``MAP`` commands."""
MAP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
GEMM_WORDS, MAP_WORDS, COPY_WORDS = 14, 11, 8
MAX_KERNEL_ARGUMENTS = 96
"""The most arguments a kernel command may pass (the widest elementwise kernels stay Python calls)."""
_ROW_MAJOR = 101


def map_tag(op: int, dtype, pattern: int) -> int:
    """The tag of ``MAP_OPERATIONS[op]`` on ``dtype`` with broadcast ``pattern`` (`map_words`).

    >>> map_tag(0, np.float32, 0), map_tag(0, np.float64, 3)
    (6, 13)
    """
    return MAP + (op * len(MAP_DTYPES) + MAP_DTYPES.index(np.dtype(dtype))) * 4 + pattern


def _word(at: str, offset: int, name: str, lines: list) -> str:
    lines.append(f"  %{name}.at = add i64 {at}, {offset}")
    lines.append(f"  %{name}.p = getelementptr i64, ptr %p, i64 %{name}.at")
    lines.append(f"  %{name} = load i64, ptr %{name}.p")
    return f"%{name}"


def _next(label: str, size: int, lines: list, block: str = "") -> tuple[str, str]:
    """The lines that go on to the command after one of ``size`` words, in ``block`` (by default
    ``{label}.end``); (next word, from block)."""
    lines.append(f"  %next.{label} = add i64 %pc, {size}")
    lines.append(f"  %more.{label} = icmp slt i64 %next.{label}, %r1")
    lines.append(f"  br i1 %more.{label}, label %loop, label %done")
    return f"%next.{label}", f"%{block or label + '.end'}"


def _kernel_blocks() -> tuple[list, list, list]:
    lines = ["kernel:"]
    count = _word("%pc", 2, "n", lines)
    lines.append(f"  switch i64 {count}, label %done [" +
                 " ".join(f"i64 {n}, label %k{n}" for n in range(MAX_KERNEL_ARGUMENTS + 1)) + "]")
    exits = []
    for n in range(MAX_KERNEL_ARGUMENTS + 1):
        lines.append(f"k{n}:")
        args = [_word("%pc", 3 + i, f"k{n}.a{i}", lines) for i in range(n)]
        lines.append(f"  call void %fn({', '.join('i64 ' + a for a in args)})")
        lines.append(f"  br label %k{n}.end")
        lines.append(f"k{n}.end:")
        exits.append(_next(f"k{n}", 3 + n, lines))
    return [(KERNEL, "kernel")], lines, exits


def _gemm_block(v: int) -> tuple[list, list, list]:
    dtype, width = GEMM_VARIANTS[v]
    scalar, integer = ("float" if dtype == np.float32 else "double"), f"i{width}"
    lines = [f"g{v}:"]
    words = [_word("%pc", 2 + i, f"g{v}.w{i}", lines) for i in range(GEMM_WORDS - 2)]
    args = []
    for i, w in enumerate(words[:-1]):
        if i in (5, 7, 9):   # the addresses
            lines.append(f"  %g{v}.ptr{i} = inttoptr i64 {w} to ptr")
            args.append(f"ptr %g{v}.ptr{i}")
        elif width == 32:
            lines.append(f"  %g{v}.i{i} = trunc i64 {w} to i32")
            args.append(f"i32 %g{v}.i{i}")
        else:
            args.append(f"i64 {w}")
    ta, tb, m, n, k, a, lda, b, ldb, c, ldc = args
    _checked(f"g{v}", words[-1], [
        f"  call void %fn({integer} {_ROW_MAJOR}, {ta}, {tb}, {m}, {n}, {k}, {scalar} 1.0, {a}, {lda}, "
        f"{b}, {ldb}, {scalar} 0.0, {c}, {ldc})"], lines)
    return [(GEMM + v, f"g{v}")], lines, [_next(f"g{v}", GEMM_WORDS, lines)]


def _checked(name: str, flags: str, work: list, lines: list) -> None:
    """``work`` between clearing and testing the floating-point status ``flags`` (a word; none when 0);
    a raised flag stores the command's word in word 0 and returns."""
    lines += [f"  %{name}.flags = trunc i64 {flags} to i32",
              f"  %{name}.check = icmp ne i32 %{name}.flags, 0",
              f"  br i1 %{name}.check, label %{name}.clear, label %{name}.work",
              f"{name}.clear:",
              f"  %{name}.cleared = call i32 @feclearexcept(i32 %{name}.flags)",
              f"  br label %{name}.work",
              f"{name}.work:"]
    lines += work
    lines += [f"  br i1 %{name}.check, label %{name}.test, label %{name}.end",
              f"{name}.test:",
              f"  %{name}.raised = call i32 @fetestexcept(i32 %{name}.flags)",
              f"  %{name}.clean = icmp eq i32 %{name}.raised, 0",
              f"  br i1 %{name}.clean, label %{name}.end, label %{name}.stop",
              f"{name}.stop:",
              "  store i64 %pc, ptr %p",
              "  ret void",
              f"{name}.end:"]


def _rows(name: str, body: list, n_rows: str, lines: list, entry: str = "") -> None:
    """A loop of ``body`` (lines using ``%{name}.r``, the row) over ``n_rows`` rows (at least one),
    entered from block ``entry`` (by default ``name``)."""
    lines += [f"  br label %{name}.row", f"{name}.row:",
              f"  %{name}.r = phi i64 [0, %{entry or name}], [%{name}.r.next, %{name}.row.end]"]
    lines += body
    lines += [f"  br label %{name}.row.end", f"{name}.row.end:",
              f"  %{name}.r.next = add i64 %{name}.r, 1",
              f"  %{name}.r.more = icmp slt i64 %{name}.r.next, {n_rows}",
              f"  br i1 %{name}.r.more, label %{name}.row, label %{name}.end", f"{name}.end:"]


def _row_address(name: str, row: str, base: str, stride: str, lines: list) -> str:
    lines.append(f"  %{name}.off = mul i64 {row}, {stride}")
    lines.append(f"  %{name}.at = add i64 {base}, %{name}.off")
    lines.append(f"  %{name}.ptr = inttoptr i64 %{name}.at to ptr")
    return f"%{name}.ptr"


def _map_block(op: int, d: int, pattern: int) -> tuple[list, list, list]:
    """``out = a <op> b`` over rows of columns; ``pattern``'s bits: a, b read one element per row."""
    name, (instruction, _), dtype = f"m{op}.{d}.{pattern}", MAP_OPERATIONS[op], MAP_DTYPES[d]
    scalar = "float" if dtype == np.float32 else "double"
    lines = [f"{name}:"]
    rows, cols, a, a_rows, b, b_rows, out, out_rows, flags = (_word("%pc", 2 + i, f"{name}.w{i}", lines)
                                                              for i in range(9))
    body = []
    pa, pb, po = (_row_address(f"{name}.{which}", f"%{name}.r", base, stride, body)
                  for which, base, stride in (("a", a, a_rows), ("b", b, b_rows), ("o", out, out_rows)))
    body += [f"  br label %{name}.col", f"{name}.col:",
             f"  %{name}.c = phi i64 [0, %{name}.row], [%{name}.c.next, %{name}.col]"]
    values = []
    for which, row, bit in (("x", pa, 1), ("y", pb, 2)):
        at = "0" if pattern & bit else f"%{name}.c"
        body.append(f"  %{name}.{which}.p = getelementptr {scalar}, ptr {row}, i64 {at}")
        body.append(f"  %{name}.{which} = load {scalar}, ptr %{name}.{which}.p")
        values.append(f"%{name}.{which}")
    body += [f"  %{name}.z = {instruction} {scalar} {values[0]}, {values[1]}",
             f"  %{name}.z.p = getelementptr {scalar}, ptr {po}, i64 %{name}.c",
             f"  store {scalar} %{name}.z, ptr %{name}.z.p",
             f"  %{name}.c.next = add i64 %{name}.c, 1",
             f"  %{name}.c.more = icmp slt i64 %{name}.c.next, {cols}",
             f"  br i1 %{name}.c.more, label %{name}.col, label %{name}.row.end"]
    loop: list = []
    _rows(name, body, rows, loop, entry=f"{name}.f.work")
    _checked(f"{name}.f", flags, loop, lines)
    return [(map_tag(op, dtype, pattern), name)], lines, [_next(name, MAP_WORDS, lines, f"{name}.f.end")]


def _copy_block() -> tuple[list, list, list]:
    lines = ["copy:"]
    rows, size, src, src_rows, dst, dst_rows = (_word("%pc", 2 + i, f"copy.w{i}", lines) for i in range(6))
    body = []
    ps = _row_address("copy.s", "%copy.r", src, src_rows, body)
    pd = _row_address("copy.d", "%copy.r", dst, dst_rows, body)
    body.append(f"  call void @llvm.memcpy.p0.p0.i64(ptr {pd}, ptr {ps}, i64 {size}, i1 false)")
    _rows("copy", body, rows, lines)
    return [(COPY, "copy")], lines, [_next("copy", COPY_WORDS, lines)]


def runner_ir() -> str:
    """The LLVM IR of the runner: ``minflux_run(first word, end word, 0, 0, 0, words)``."""
    blocks = [_kernel_blocks(), *(_gemm_block(v) for v in range(len(GEMM_VARIANTS))),
              *(_map_block(op, d, pattern) for op in range(len(MAP_OPERATIONS)) for d in range(len(MAP_DTYPES))
                for pattern in range(4)),
              _copy_block()]
    cases = " ".join(f"i64 {tag}, label %{label}" for block in blocks for tag, label in block[0])
    exits = ", ".join(f"[{value}, {label}]" for block in blocks for value, label in block[2])
    lines = ["declare i32 @feclearexcept(i32)", "declare i32 @fetestexcept(i32)",
             "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)", "",
             "define void @minflux_run(i64 %r0, i64 %r1, i64 %inner, i64 %total, i64 %rows, ptr %p) {",
             "entry:", "  %any = icmp slt i64 %r0, %r1", "  br i1 %any, label %loop, label %done", "loop:",
             f"  %pc = phi i64 [%r0, %entry], {exits}",
             "  %tag.p = getelementptr i64, ptr %p, i64 %pc", "  %tag = load i64, ptr %tag.p"]
    fn = _word("%pc", 1, "fn.word", lines)
    lines += [f"  %fn = inttoptr i64 {fn} to ptr", f"  switch i64 %tag, label %done [{cases}]"]
    for block in blocks:
        lines += block[1]
    lines += ["done:", "  ret void", "}"]
    return "\n".join(lines) + "\n"


