"""The LLVM IR of the native runner (`minflux.runtime.native_runner`): one function, a block per command.

The function walks the words of a program from a first to an end word. Each command's block reads
its words, does its work and goes on to the next command; a command's words are laid out as the
builders in `native_runner` write them, and start with its tag (the constants here).

>>> "define void @minflux_run(" in runner_ir()
True
"""
from __future__ import annotations

import numpy as np

__all__ = ["COPY", "COPY_WORDS", "GEMM", "GEMM_VARIANTS", "GEMM_WORDS", "INTEGER_MAP", "KERNEL", "MAP",
           "MAP_DTYPES", "MAP_INTEGERS", "MAP_OPERATIONS", "MAP_WORDS", "MAX_KERNEL_ARGUMENTS", "POWERS",
           "LOGICAL", "LOGICAL_MAP", "LOOP", "LOOP_WORDS", "POWERS_WORDS", "PREDICATE", "PREDICATES", "ROWS_CHECK",
           "ROWS_CHECK_WORDS", "SUM", "SUM_WORDS", "WORDS_FROM", "ZERO_ROWS", "ZERO_ROWS_WORDS", "map_tag", "runner_ir",
           "sum_tag"]

KERNEL, GEMM, COPY, MAP = 0, 1, 5, 6
GEMM_VARIANTS = ((np.dtype(np.float32), 32), (np.dtype(np.float32), 64),
                 (np.dtype(np.float64), 32), (np.dtype(np.float64), 64))
"""(dtype, integer width) of ``GEMM + i``: ``cblas_sgemm`` or ``cblas_dgemm`` with 32- or 64-bit ints."""
MAP_OPERATIONS = (("fadd", np.add), ("fsub", np.subtract), ("fmul", np.multiply), ("fdiv", np.true_divide))
"""(LLVM instruction, the numpy ufunc it is) of ``MAP`` commands."""
MAP_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
SUM = MAP + len(MAP_OPERATIONS) * len(MAP_DTYPES) * 4
"""``SUM + 2 * mode + dtype``: sums of rows (mode 0) or of columns (mode 1) as numpy's ``add.reduce``."""
MAP_INTEGERS = (np.dtype(np.int64),)
"""The integer dtypes of ``MAP`` commands of the first three operations (``+ - *``), which wrap around
as numpy's integer arithmetic does."""
INTEGER_MAP = SUM + 2 * len(MAP_DTYPES)
POWERS = INTEGER_MAP + 3 * len(MAP_INTEGERS) * 4
"""``POWERS + dtype``: ``1 - b ** t`` of two bases and a step count, as Python computes them (`powers_words`)."""
ROWS_CHECK, ZERO_ROWS = POWERS + len(MAP_DTYPES), POWERS + len(MAP_DTYPES) + 1
"""The walk stops where at least so many rows are masked; the first bytes of the masked rows are zeroed."""
PREDICATES = (("fcmp une", np.not_equal), ("fcmp oeq", np.equal))
"""Comparisons of float32 or float64 elements into booleans (`MAP_WORDS` commands from ``PREDICATE``)."""
LOGICAL = (("or", np.logical_or), ("and", np.logical_and))
"""Logical operations of booleans (`MAP_WORDS` commands from ``LOGICAL_MAP``)."""
PREDICATE = ZERO_ROWS + 1
LOGICAL_MAP = PREDICATE + len(PREDICATES) * len(MAP_DTYPES) * 4
LOOP = LOGICAL_MAP + len(LOGICAL) * 4
"""A call of numpy's own strided loop of a ufunc (`loop_words`), as numpy's ufunc call makes it."""
_PREDICATE_AT = {fn: i for i, (_, fn) in enumerate(PREDICATES)}
_LOGICAL_AT = {fn: i for i, (_, fn) in enumerate(LOGICAL)}
GEMM_WORDS, MAP_WORDS, COPY_WORDS, SUM_WORDS, POWERS_WORDS, ROWS_CHECK_WORDS, ZERO_ROWS_WORDS, LOOP_WORDS = \
    14, 11, 8, 9, 6, 5, 7, 12
WORDS_FROM = ((GEMM, GEMM_WORDS), (COPY, COPY_WORDS), (MAP, MAP_WORDS), (SUM, SUM_WORDS),
              (INTEGER_MAP, MAP_WORDS), (POWERS, POWERS_WORDS), (ROWS_CHECK, ROWS_CHECK_WORDS),
              (ZERO_ROWS, ZERO_ROWS_WORDS), (PREDICATE, MAP_WORDS), (LOOP, LOOP_WORDS))
"""(first tag, words of each command of the tags from there on), by tag: every command but a kernel."""
MAX_KERNEL_ARGUMENTS = 96
"""The most arguments a kernel command may pass (the widest elementwise kernels stay Python calls)."""
_ROW_MAJOR = 101


def map_tag(op: int, dtype, pattern: int) -> int:
    """The tag of ``MAP_OPERATIONS[op]`` (or of ``op``, a ufunc of `PREDICATES` or `LOGICAL`) on ``dtype``
    (of the operands) with broadcast ``pattern`` (`map_words`).

    >>> map_tag(0, np.float32, 0), map_tag(0, np.float64, 3), map_tag(0, np.int64, 0) == INTEGER_MAP
    (6, 13, True)
    """
    dtype = np.dtype(dtype)
    if op in _LOGICAL_AT:
        return LOGICAL_MAP + _LOGICAL_AT[op] * 4 + pattern
    if op in _PREDICATE_AT:
        return PREDICATE + (_PREDICATE_AT[op] * len(MAP_DTYPES) + MAP_DTYPES.index(dtype)) * 4 + pattern
    if dtype in MAP_INTEGERS:
        return INTEGER_MAP + (op * len(MAP_INTEGERS) + MAP_INTEGERS.index(dtype)) * 4 + pattern
    return MAP + (op * len(MAP_DTYPES) + MAP_DTYPES.index(dtype)) * 4 + pattern


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


_SCALARS = {"f4": "float", "f8": "double", "i8": "i64", "b1": "i8"}


def _map_block(op, dtype, pattern: int) -> tuple[list, list, list]:
    """``out = a <op> b`` over rows of columns (`map_tag`); ``pattern``'s bits: a, b read one element per
    row."""
    scalar, code = _SCALARS[dtype.str[1:]], dtype.str[1:]
    if op in _PREDICATE_AT:
        predicate = PREDICATES[_PREDICATE_AT[op]][0]
        name, out, lines = f"q{op.__name__}.{code}.{pattern}", "i8", [
            "  {z}.i1 = " + predicate + " " + scalar + " {x}, {y}", "  {z} = zext i1 {z}.i1 to i8"]
    elif op in _LOGICAL_AT:
        instruction = LOGICAL[_LOGICAL_AT[op]][0]
        name, out, lines = f"l{op.__name__}.{pattern}", "i8", [
            "  {z}.both = " + instruction + " i8 {x}, {y}", "  {z}.i1 = icmp ne i8 {z}.both, 0",
            "  {z} = zext i1 {z}.i1 to i8"]
    else:
        instruction = MAP_OPERATIONS[op][0][dtype.kind == "i":]   # add, sub, mul for integers
        name, out, lines = f"m{op}.{code}.{pattern}", scalar, ["  {z} = " + instruction + " " + scalar + " {x}, {y}"]
    return _elementwise(name, map_tag(op, dtype, pattern), pattern, scalar, out, lines)


def _elementwise(name: str, tag: int, pattern: int, scalar: str, out_scalar: str, compute: list):
    """The block of a `MAP_WORDS` command computing ``{z}`` of type ``out_scalar`` from ``{x}`` and
    ``{y}`` of type ``scalar`` by the lines ``compute``."""
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
    body += [line.format(z=f"%{name}.z", x=values[0], y=values[1]) for line in compute]
    body += [f"  %{name}.z.p = getelementptr {out_scalar}, ptr {po}, i64 %{name}.c",
             f"  store {out_scalar} %{name}.z, ptr %{name}.z.p",
             f"  %{name}.c.next = add i64 %{name}.c, 1",
             f"  %{name}.c.more = icmp slt i64 %{name}.c.next, {cols}",
             f"  br i1 %{name}.c.more, label %{name}.col, label %{name}.row.end"]
    loop: list = []
    _rows(name, body, rows, loop, entry=f"{name}.f.work")
    _checked(f"{name}.f", flags, loop, lines)
    return [(tag, name)], lines, [_next(name, MAP_WORDS, lines, f"{name}.f.end")]


def sum_tag(by_columns: bool, dtype) -> int:
    """The tag of the sums of rows (or of columns) of ``dtype`` elements (`sum_words`).

    >>> sum_tag(False, np.float32) == SUM, sum_tag(True, np.float64) == SUM + 3
    (True, True)
    """
    return SUM + 2 * by_columns + MAP_DTYPES.index(np.dtype(dtype))


def _pairwise(d: int) -> list:
    """``@pairwise.{d}(ptr a, i64 n)``: numpy's pairwise sum of ``n`` contiguous elements (fewer than 8
    in order from -0.0; up to 128 in 8 running sums combined as a tree, the rest in order; more
    split in two at a multiple of 8 below the half)."""
    t, f = ("float" if MAP_DTYPES[d] == np.float32 else "double"), f"@pairwise.{d}"
    lines = [f"define internal {t} {f}(ptr %a, i64 %n) {{", "entry:",
             "  %small = icmp slt i64 %n, 8", "  br i1 %small, label %few, label %more",
             "few:", "  %few.any = icmp sgt i64 %n, 0", "  br i1 %few.any, label %few.loop, label %few.done",
             "few.loop:", "  %fi = phi i64 [0, %few], [%fi.next, %few.loop]",
             f"  %fs = phi {t} [-0.0, %few], [%fs.next, %few.loop]",
             f"  %fx.p = getelementptr {t}, ptr %a, i64 %fi", f"  %fx = load {t}, ptr %fx.p",
             f"  %fs.next = fadd {t} %fs, %fx", "  %fi.next = add i64 %fi, 1",
             "  %fi.more = icmp slt i64 %fi.next, %n", "  br i1 %fi.more, label %few.loop, label %few.done",
             "few.done:", f"  %few.sum = phi {t} [-0.0, %few], [%fs.next, %few.loop]", f"  ret {t} %few.sum",
             "more:", "  %block = icmp sle i64 %n, 128", "  br i1 %block, label %unrolled, label %split",
             "unrolled:"]
    firsts = [f"%u{j}" for j in range(8)]
    for j in range(8):
        lines += [f"  %u{j}.p = getelementptr {t}, ptr %a, i64 {j}", f"  %u{j} = load {t}, ptr %u{j}.p"]
    lines += ["  %rest = srem i64 %n, 8", "  %whole = sub i64 %n, %rest", "  %eight.more = icmp slt i64 8, %whole",
              "  br i1 %eight.more, label %eights, label %tree",
              "eights:", "  %ei = phi i64 [8, %unrolled], [%ei.next, %eights]"]
    lines += [f"  %r{j} = phi {t} [{firsts[j]}, %unrolled], [%r{j}.next, %eights]" for j in range(8)]
    for j in range(8):
        lines += [f"  %e{j}.i = add i64 %ei, {j}", f"  %e{j}.p = getelementptr {t}, ptr %a, i64 %e{j}.i",
                  f"  %e{j} = load {t}, ptr %e{j}.p", f"  %r{j}.next = fadd {t} %r{j}, %e{j}"]
    lines += ["  %ei.next = add i64 %ei, 8", "  %ei.more = icmp slt i64 %ei.next, %whole",
              "  br i1 %ei.more, label %eights, label %tree", "tree:"]
    for j in range(8):
        lines.append(f"  %t{j} = phi {t} [{firsts[j]}, %unrolled], [%r{j}.next, %eights]")
    lines += [f"  %t01 = fadd {t} %t0, %t1", f"  %t23 = fadd {t} %t2, %t3", f"  %t45 = fadd {t} %t4, %t5",
              f"  %t67 = fadd {t} %t6, %t7", f"  %t03 = fadd {t} %t01, %t23", f"  %t47 = fadd {t} %t45, %t67",
              f"  %tree.sum = fadd {t} %t03, %t47", "  %tail.any = icmp slt i64 %whole, %n",
              "  br i1 %tail.any, label %tail, label %tail.done",
              "tail:", "  %ti = phi i64 [%whole, %tree], [%ti.next, %tail]",
              f"  %ts = phi {t} [%tree.sum, %tree], [%ts.next, %tail]",
              f"  %tx.p = getelementptr {t}, ptr %a, i64 %ti", f"  %tx = load {t}, ptr %tx.p",
              f"  %ts.next = fadd {t} %ts, %tx", "  %ti.next = add i64 %ti, 1",
              "  %ti.more = icmp slt i64 %ti.next, %n", "  br i1 %ti.more, label %tail, label %tail.done",
              "tail.done:", f"  %unrolled.sum = phi {t} [%tree.sum, %tree], [%ts.next, %tail]",
              f"  ret {t} %unrolled.sum",
              "split:", "  %half = sdiv i64 %n, 2", "  %half.rest = srem i64 %half, 8",
              "  %n2 = sub i64 %half, %half.rest", "  %n3 = sub i64 %n, %n2",
              f"  %second.p = getelementptr {t}, ptr %a, i64 %n2",
              f"  %first.sum = call {t} {f}(ptr %a, i64 %n2)", f"  %second.sum = call {t} {f}(ptr %second.p, i64 %n3)",
              f"  %split.sum = fadd {t} %first.sum, %second.sum", f"  ret {t} %split.sum", "}"]
    return lines


def _sum_block(by_columns: bool, d: int) -> tuple[list, list, list]:
    """Sums of ``rows`` rows of ``cols`` contiguous elements (row ``r`` at ``a + r a_rows`` bytes): of
    each row into ``out + r out_step`` (``0 + pairwise``), or of each column into ``out`` (``0 + a[0]
    + a[1] + ...`` in order), as numpy's ``add.reduce`` sums along and across its inner loop."""
    name, t = f"s{int(by_columns)}.{d}", ("float" if MAP_DTYPES[d] == np.float32 else "double")
    lines = [f"{name}:"]
    rows, cols, a, a_rows, out, out_step, flags = (_word("%pc", 2 + i, f"{name}.w{i}", lines) for i in range(7))
    work: list = []
    if by_columns:
        work += [f"  %{name}.po = inttoptr i64 {out} to ptr",
                 f"  call void @llvm.memset.p0.i64(ptr %{name}.po, i8 0, i64 %{name}.bytes, i1 false)"]
        lines.append(f"  %{name}.bytes = mul i64 {cols}, {MAP_DTYPES[d].itemsize}")
        body: list = []
        pa = _row_address(f"{name}.a", f"%{name}.r", a, a_rows, body)
        body += [f"  br label %{name}.col", f"{name}.col:",
                 f"  %{name}.c = phi i64 [0, %{name}.row], [%{name}.c.next, %{name}.col]",
                 f"  %{name}.x.p = getelementptr {t}, ptr {pa}, i64 %{name}.c", f"  %{name}.x = load {t}, ptr %{name}.x.p",
                 f"  %{name}.s.p = getelementptr {t}, ptr %{name}.po, i64 %{name}.c",
                 f"  %{name}.s = load {t}, ptr %{name}.s.p", f"  %{name}.s.next = fadd {t} %{name}.s, %{name}.x",
                 f"  store {t} %{name}.s.next, ptr %{name}.s.p", f"  %{name}.c.next = add i64 %{name}.c, 1",
                 f"  %{name}.c.more = icmp slt i64 %{name}.c.next, {cols}",
                 f"  br i1 %{name}.c.more, label %{name}.col, label %{name}.row.end"]
    else:
        body = []
        pa = _row_address(f"{name}.a", f"%{name}.r", a, a_rows, body)
        po = _row_address(f"{name}.o", f"%{name}.r", out, out_step, body)
        body += [f"  %{name}.pw = call {t} @pairwise.{d}(ptr {pa}, i64 {cols})",
                 f"  %{name}.sum = fadd {t} 0.0, %{name}.pw", f"  store {t} %{name}.sum, ptr {po}"]
    _rows(name, body, rows, work, entry=f"{name}.f.work")
    _checked(f"{name}.f", flags, work, lines)
    return [(sum_tag(by_columns, MAP_DTYPES[d]), name)], lines, [_next(name, SUM_WORDS, lines, f"{name}.f.end")]


def _powers_block(d: int) -> tuple[list, list, list]:
    """``out[k] = 1.0 - b_k ** t`` for the int64 ``t`` at an address and two float64 bases (their bits),
    each rounded to ``MAP_DTYPES[d]``: the C library's ``pow``, which Python's ``**`` of floats calls
    (a call LLVM may not rewrite, so that it stays that function). Where Python would raise instead (a
    negative ``t``, a power that overflows), the walk stops at the command."""
    name, t = f"p{d}", ("float" if MAP_DTYPES[d] == np.float32 else "double")
    lines = [f"{name}:"]
    count, base0, base1, out = (_word("%pc", 2 + i, f"{name}.w{i}", lines) for i in range(4))
    lines += [f"  %{name}.tp = inttoptr i64 {count} to ptr", f"  %{name}.t = load i64, ptr %{name}.tp",
              f"  %{name}.n = sitofp i64 %{name}.t to double", f"  %{name}.o = inttoptr i64 {out} to ptr",
              f"  %{name}.bad = icmp slt i64 %{name}.t, 0"]
    for k, base in enumerate((base0, base1)):
        v, bad = f"%{name}.{k}", f"%{name}.bad{k}"
        lines += [f"  {v}.b = bitcast i64 {base} to double",
                  f"  {v}.p = call double @pow(double {v}.b, double %{name}.n) #0",
                  f"  {v}.abs = call double @llvm.fabs.f64(double {v}.p)",
                  f"  {v}.inf = fcmp oeq double {v}.abs, 0x7FF0000000000000",
                  f"  {bad} = or i1 %{name}.bad{k - 1 if k else ''}, {v}.inf",
                  f"  {v}.c = fsub double 1.0, {v}.p",
                  (f"  {v}.r = fptrunc double {v}.c to float" if t == "float" else f"  {v}.r = fadd double {v}.c, 0.0"),
                  f"  {v}.at = getelementptr {t}, ptr %{name}.o, i64 {k}"]
    lines += [f"  br i1 %{name}.bad1, label %{name}.stop, label %{name}.store",
              f"{name}.stop:", "  store i64 %pc, ptr %p", "  ret void",
              f"{name}.store:"]
    lines += [f"  store {t} %{name}.{k}.r, ptr %{name}.{k}.at" for k in range(2)]
    return [(POWERS + d, name)], lines, [_next(name, POWERS_WORDS, lines, f"{name}.store")]


def _rows_check_block() -> tuple[list, list, list]:
    """Count the rows of a boolean mask that are 0; where they are at least a given number, stop."""
    lines = ["rc:"]
    keep, rows, least = (_word("%pc", 2 + i, f"rc.w{i}", lines) for i in range(3))
    lines += [f"  %rc.keep = inttoptr i64 {keep} to ptr", "  br label %rc.row", "rc.row:",
              "  %rc.r = phi i64 [0, %rc], [%rc.r.next, %rc.row]",
              "  %rc.n = phi i64 [0, %rc], [%rc.n.next, %rc.row]",
              "  %rc.at = getelementptr i8, ptr %rc.keep, i64 %rc.r", "  %rc.v = load i8, ptr %rc.at",
              "  %rc.zero = icmp eq i8 %rc.v, 0", "  %rc.one = zext i1 %rc.zero to i64",
              "  %rc.n.next = add i64 %rc.n, %rc.one", "  %rc.r.next = add i64 %rc.r, 1",
              f"  %rc.more = icmp slt i64 %rc.r.next, {rows}", "  br i1 %rc.more, label %rc.row, label %rc.end",
              "rc.end:", f"  %rc.skip = icmp sge i64 %rc.n.next, {least}",
              "  br i1 %rc.skip, label %rc.stop, label %rc.go", "rc.stop:", "  store i64 %pc, ptr %p", "  ret void",
              "rc.go:"]
    return [(ROWS_CHECK, "rc")], lines, [_next("rc", ROWS_CHECK_WORDS, lines, "rc.go")]


def _zero_rows_block() -> tuple[list, list, list]:
    """Zero the first bytes of each row whose byte in a boolean mask is 0."""
    lines = ["zr:"]
    keep, rows, out, stride, size = (_word("%pc", 2 + i, f"zr.w{i}", lines) for i in range(5))
    lines += [f"  %zr.keep = inttoptr i64 {keep} to ptr", "  br label %zr.row", "zr.row:",
              "  %zr.r = phi i64 [0, %zr], [%zr.r.next, %zr.row.end]",
              "  %zr.at = getelementptr i8, ptr %zr.keep, i64 %zr.r", "  %zr.v = load i8, ptr %zr.at",
              "  %zr.drop = icmp eq i8 %zr.v, 0", "  br i1 %zr.drop, label %zr.masked, label %zr.row.end",
              "zr.masked:"]
    row = _row_address("zr.o", "%zr.r", out, stride, lines)
    lines += [f"  call void @llvm.memset.p0.i64(ptr {row}, i8 0, i64 {size}, i1 false)", "  br label %zr.row.end",
              "zr.row.end:", "  %zr.r.next = add i64 %zr.r, 1", f"  %zr.more = icmp slt i64 %zr.r.next, {rows}",
              "  br i1 %zr.more, label %zr.row, label %zr.end", "zr.end:"]
    return [(ZERO_ROWS, "zr")], lines, [_next("zr", ZERO_ROWS_WORDS, lines)]


def _loop_block() -> tuple[list, list, list]:
    """``status = loop(context, data, &count, strides, auxdata)``: numpy's strided loop of a ufunc,
    called as numpy calls it (its words hold ``count``, then the operands' addresses, then their
    strides: the arrays it reads); a status other than 0 stops the walk."""
    lines = ["u:"]
    context, auxdata = (_word("%pc", 2 + i, f"u.w{i}", lines) for i in range(2))
    flags = _word("%pc", 11, "u.flags.word", lines)
    pointers = []
    for name, at in (("context", context), ("auxdata", auxdata)):
        lines.append(f"  %u.{name} = inttoptr i64 {at} to ptr")
    for name, offset in (("count", 4), ("data", 5), ("strides", 8)):
        lines += [f"  %u.{name}.at = add i64 %pc, {offset}",
                  f"  %u.{name} = getelementptr i64, ptr %p, i64 %u.{name}.at"]
        pointers.append(f"ptr %u.{name}")
    count, data, strides = pointers
    _checked("u.f", flags, [
        f"  %u.status = call i32 %fn(ptr %u.context, {data}, {count}, {strides}, ptr %u.auxdata)",
        "  %u.failed = icmp ne i32 %u.status, 0", "  br i1 %u.failed, label %u.stop, label %u.ran",
        "u.stop:", "  store i64 %pc, ptr %p", "  ret void", "u.ran:"], lines)
    return [(LOOP, "u")], lines, [_next("u", LOOP_WORDS, lines, "u.f.end")]


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
              *(_map_block(op, dtype, pattern) for op in range(len(MAP_OPERATIONS)) for dtype in MAP_DTYPES
                for pattern in range(4)),
              *(_map_block(op, dtype, pattern) for op in range(3) for dtype in MAP_INTEGERS for pattern in range(4)),
              *(_map_block(op, dtype, pattern) for _, op in PREDICATES for dtype in MAP_DTYPES for pattern in range(4)),
              *(_map_block(op, np.dtype(bool), pattern) for _, op in LOGICAL for pattern in range(4)),
              *(_sum_block(by_columns, d) for by_columns in (False, True) for d in range(len(MAP_DTYPES))),
              *(_powers_block(d) for d in range(len(MAP_DTYPES))), _rows_check_block(), _zero_rows_block(),
              _loop_block(), _copy_block()]
    cases = " ".join(f"i64 {tag}, label %{label}" for block in blocks for tag, label in block[0])
    exits = ", ".join(f"[{value}, {label}]" for block in blocks for value, label in block[2])
    lines = ["declare i32 @feclearexcept(i32)", "declare i32 @fetestexcept(i32)",
             "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)",
             "declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)", "declare double @pow(double, double)",
             "declare double @llvm.fabs.f64(double)",
             "attributes #0 = { nobuiltin }", "",
             *(line for d in range(len(MAP_DTYPES)) for line in _pairwise(d)), "",
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


