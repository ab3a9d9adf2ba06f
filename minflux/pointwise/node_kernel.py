"""A broadcast node's backward pass as one compiled kernel: every argument's gradient in one pass.

A node keeps ``d outputs[m] / d args[k]`` per element, and its backward pass is
``grad_k = sum over m of g_m * p_mk``. Done with numpy, that is a product per partial, a finiteness
check per product and an add per further term: the HM-LSTM's cell update (two outputs, ten partials)
took some fifteen numpy calls and as many passes over memory per layer and time step. This kernel
reads each output gradient and partial once and writes each argument's sum once, with the numpy
path's arithmetic: each product rounded in the arrays' float type, a product that is not finite
where a factor is zero taken as zero (a zero annihilates an infinity or a NaN, as everywhere in
minflux), and the terms added in the node's order, so both give the same bits (but for which of two
NaNs a sum keeps, which the CPU decides).

The kernels are written as LLVM IR and compiled and cached like every elementwise kernel
(`minflux.runtime.kernel_loader.load_ir_kernel`), one per term structure and float type.

>>> import numpy as np
>>> g = [np.array([1.0, 0.0]), np.array([2.0, 3.0])]
>>> p = [np.array([0.5, np.inf]), np.array([1.0, 1.0])]
>>> [s.tolist() for s in gradient_sums(g, p, (((0, 0), (1, 1)),))]
[[2.5, 3.0]]
"""
from __future__ import annotations

import threading
from typing import NamedTuple

import numpy as np

from ..compiler import FLOAT_DTYPES, row_stride
from ..runtime.kernel_loader import load_ir_kernel
from ..runtime.native_runner import MAX_KERNEL_ARGUMENTS, function_address, kernel_words
from ..runtime.pointers import pointers
from ..runtime.row_pool import run_rows
from ..runtime.split_choice import SplitChoice
from ..runtime.threads import PARALLEL_MIN_ELEMENTS, threads_now

__all__ = ["Walk", "gradient_sums", "gradient_sums_command", "kernel_ir", "walk"]

_ROW = 1024   # elements per unit of work when a large sum splits over threads

_TYPES = {"float32": "float", "float64": "double"}


class Walk(NamedTuple):
    """How a kernel walks its arrays: ``rows`` rows of ``inner`` elements, ``total`` in all. Flat
    (``steps`` None): every array C-contiguous of one shape, in rows of `_ROW` elements. By rows:
    array ``k`` has ``strides[k]`` elements between rows and reads ``steps[k]`` (1, or 0 for a value
    broadcast along the row) elements further per column."""

    rows: int
    inner: int
    total: int
    strides: tuple = ()
    steps: tuple | None = None


def walk(grads: list, partials: list, written: list, rows: bool = True) -> Walk | None:
    """How one kernel walks ``grads`` (the node's output gradients, of one shape), ``partials``
    (broadcast to it) and ``written`` (arrays of that shape the sums go into), or None where it
    cannot: other types or dtypes, a layout that is not rows of elements (or of one element
    broadcast) a fixed stride apart, or not flat unless ``rows``. Gradients and partials are only
    read, so they may be broadcast (a mean's gradient); the arrays written may not.

    >>> g = np.ones((4, 6))[:, :3]
    >>> walk([g], [np.ones((4, 1))], [np.empty((4, 3))])
    Walk(rows=4, inner=3, total=12, strides=(6, 1, 3), steps=(1, 0, 1))
    """
    first = grads[0]
    if first.__class__ is not np.ndarray or first.dtype not in FLOAT_DTYPES:
        return None
    shape, dtype = first.shape, first.dtype
    arrays = [*grads, *partials, *written]
    flat = True
    for a in arrays:
        if a.__class__ is not np.ndarray or a.dtype != dtype:
            return None
        flat = flat and a.shape == shape and a.flags.c_contiguous
    total = first.size
    if flat:
        return Walk(-(-total // _ROW), _ROW, total)
    if not rows or not shape or any(a.shape != shape for a in (*grads, *written)):
        return None
    inner = shape[-1]
    laid = [(inner, 1) if a.shape == shape and a.flags.c_contiguous else _rows_of(a, shape) for a in arrays]
    if None in laid:
        return None
    for stride, step in laid[len(arrays) - len(written):]:
        if step != 1 and inner > 1 or stride < inner and total > inner:
            return None   # a sum's rows must not overlap
    return Walk(total // inner if inner else 0, inner, total, tuple(r for r, _ in laid), tuple(s for _, s in laid))


def _rows_of(a: np.ndarray, shape: tuple) -> tuple | None:
    """(elements between rows, elements between columns: 0 or 1) of ``a`` broadcast to ``shape`` and
    seen as rows of its last dimension, or None where its rows are not one stride apart
    (`minflux.compiler.row_stride`)."""
    try:
        b = np.broadcast_to(a, shape)
    except ValueError:
        return None
    if shape[-1] > 1 and b.strides[-1]:   # rows of contiguous elements
        stride = row_stride(b, shape[-1])
        return None if stride is None else (stride, 1)
    stride = row_stride(b[..., :1], 1)     # one element per row
    return None if stride is None else (stride, 0)


def kernel_ir(structure: tuple, n_grads: int, n_partials: int, float_type: str, in_place: bool = False,
              steps: tuple | None = None) -> str:
    """The LLVM IR of the kernel for ``structure``: per sum, its ``(gradient, partial)`` terms in
    order; ``in_place`` stores each sum over its first partial instead of into an output array;
    ``steps`` walks by rows (`Walk`), taking the row strides as arguments after ``rows``.

    >>> print(kernel_ir((((0, 0), (0, 1)),), 1, 2, "float32"))  # doctest: +ELLIPSIS
    ; a minflux node-gradient kernel (float32)
    define void @minflux_node_kernel(i64 %r0, i64 %r1, i64 %inner, i64 %total, i64 %rows, ptr %g0, ptr %p0, ptr %p1, ptr %q0) {
    ...
      %t0.0 = fmul float %g0.v, %x0.0
    ...
    """
    t = _TYPES[float_type]
    names = [f"%g{j}" for j in range(n_grads)] + [f"%p{j}" for j in range(n_partials)] + \
        ([] if in_place else [f"%q{j}" for j in range(len(structure))])
    at = {n: "%i" if steps is None or steps[k] else "0" for k, n in enumerate(names)}   # an array's column index
    strides = [] if steps is None else [f"i64 %stride{k}" for k in range(len(names))]
    params = ", ".join(["i64 %r0", "i64 %r1", "i64 %inner", "i64 %total", "i64 %rows", *strides] +
                       [f"ptr {n}" for n in names])
    body = []
    for g in sorted({g for terms in structure for g, _ in terms}):
        body += [f"  %g{g}.at = getelementptr {t}, ptr %g{g}.lo, i64 {at[f'%g{g}']}",
                 f"  %g{g}.v = load {t}, ptr %g{g}.at", f"  %g{g}.zero = fcmp oeq {t} %g{g}.v, 0.0"]
    for q, terms in enumerate(structure):
        for n, (g, p) in enumerate(terms):
            v = f"{q}.{n}"
            body += [f"  %p{v}.at = getelementptr {t}, ptr %p{p}.lo, i64 {at[f'%p{p}']}",
                     f"  %x{v} = load {t}, ptr %p{v}.at",
                     f"  %t{v} = fmul {t} %g{g}.v, %x{v}",
                     # a product that is not finite where a factor is zero is zero
                     f"  %a{v} = call {t} @llvm.fabs.{_TAG[t]}({t} %t{v})",
                     f"  %f{v} = fcmp olt {t} %a{v}, 0x7FF0000000000000",
                     f"  %z{v} = fcmp oeq {t} %x{v}, 0.0", f"  %zz{v} = or i1 %g{g}.zero, %z{v}",
                     f"  %nf{v} = xor i1 %f{v}, true", f"  %k{v} = and i1 %nf{v}, %zz{v}",
                     f"  %u{v} = select i1 %k{v}, {t} 0.0, {t} %t{v}"]
            if n:
                body.append(f"  %s{v} = fadd {t} {total}, %u{v}")
            total = f"%s{v}" if n else f"%u{v}"
        target = f"%p{terms[0][1]}" if in_place else f"%q{q}"
        body += [f"  %o{q}.at = getelementptr {t}, ptr {target}.lo, i64 {at[target]}", f"  store {t} {total}, ptr %o{q}.at"]
    head = [f"; a minflux node-gradient kernel ({float_type})", f"define void @minflux_node_kernel({params}) {{",
            "entry:"]
    tail = ["done:", "  ret void", "}", f"declare {t} @llvm.fabs.{_TAG[t]}({t})"]
    if steps is None:
        bases = [f"  {n}.lo = getelementptr {t}, ptr {n}, i64 %lo" for n in names]
        lines = [*head, "  %lo = mul i64 %r0, %inner", "  %end = mul i64 %r1, %inner",
                 "  %short = icmp slt i64 %total, %end", "  %hi = select i1 %short, i64 %total, i64 %end",
                 "  %n = sub i64 %hi, %lo", *bases, "  %some = icmp sgt i64 %n, 0",
                 "  br i1 %some, label %loop, label %done", "loop:", "  %i = phi i64 [0, %entry], [%i.next, %loop]",
                 *body, "  %i.next = add i64 %i, 1", "  %more = icmp slt i64 %i.next, %n",
                 "  br i1 %more, label %loop, label %done", *tail]
        return "\n".join(lines) + "\n"
    bases = [line for k, n in enumerate(names) for line in
             (f"  {n}.off = mul i64 %r, %stride{k}", f"  {n}.lo = getelementptr {t}, ptr {n}, i64 {n}.off")]
    lines = [*head, "  %some.rows = icmp slt i64 %r0, %r1", "  %some.cols = icmp sgt i64 %inner, 0",
             "  %some = and i1 %some.rows, %some.cols", "  br i1 %some, label %row, label %done",
             "row:", "  %r = phi i64 [%r0, %entry], [%r.next, %row.end]", *bases, "  br label %loop",
             "loop:", "  %i = phi i64 [0, %row], [%i.next, %loop]", *body, "  %i.next = add i64 %i, 1",
             "  %more = icmp slt i64 %i.next, %inner", "  br i1 %more, label %loop, label %row.end",
             "row.end:", "  %r.next = add i64 %r, 1", "  %more.rows = icmp slt i64 %r.next, %r1",
             "  br i1 %more.rows, label %row, label %done", *tail]
    return "\n".join(lines) + "\n"


_TAG = {"float": "f32", "double": "f64"}
_kernels: dict = {}
_lock = threading.Lock()
_splitting: dict = {}   # (kernel, elements, rows) -> whether its rows gain from running split (`SplitChoice`)


def _kernel(structure: tuple, n_grads: int, n_partials: int, dtype: np.dtype, in_place: bool, steps: tuple | None):
    key = (structure, n_grads, n_partials, dtype, in_place, steps)   # the dtype, not its .name: 1.7 us a read
    kernel = _kernels.get(key)
    if kernel is None:
        ir = kernel_ir(structure, n_grads, n_partials, dtype.name, in_place, steps)
        with _lock:
            n_arrays = n_grads + n_partials + (0 if in_place else len(structure))
            kernel = _kernels[key] = load_ir_kernel(ir, "minflux_node_kernel", n_arrays,
                                                    0 if steps is None else n_arrays)
    return kernel


def gradient_sums(grads: list, partials: list, structure: tuple, in_place: bool = False,
                  sums: list | None = None, how: Walk | None = None) -> list:
    """Sum ``grads[g] * partials[p]`` over each sum's terms ``structure[q] = ((g, p), ...)``.

    The arrays must be numpy arrays of one float dtype (float32 or float64) that `walk` can walk:
    the gradients of one shape, the partials broadcast to it; every partial must appear in one term.
    Returns one new array per sum (or ``sums``, written), or with ``in_place`` each sum's first
    partial, overwritten with the sum (for partials no one else holds). ``how``: `walk` of the
    arrays when the caller has it (of the partials written ``in_place``, of ``sums`` where given).
    Large sums split their rows over the free threads where their first calls measured that faster
    (`minflux.runtime.split_choice`); each row is summed alone, so the bits are the same either way.

    >>> g, p = [np.full(3, 2.0)], [np.arange(3.0), np.ones(3)]
    >>> [s.tolist() for s in gradient_sums(g, p, (((0, 0), (0, 1)), ((0, 1),)))]
    [[2.0, 4.0, 6.0], [2.0, 2.0, 2.0]]
    >>> gradient_sums([np.full((2, 2), 3.0)], [np.array([[1.0], [2.0]])], (((0, 0),),))[0].tolist()
    [[3.0, 3.0], [6.0, 6.0]]
    """
    first = grads[0]
    n_arrays = len(grads) + len(partials)
    if in_place:
        sums = [partials[terms[0][1]] for terms in structure]
        how = how or walk(grads, partials, sums)
    else:
        new = sums is None
        if new:
            sums = [np.empty(first.shape, first.dtype) for _ in structure]
        how = how or walk(grads, partials, [] if new else sums)
        if new and how.steps is not None:   # C-contiguous rows of the gradients' shape
            how = how._replace(strides=how.strides + (how.inner,) * len(sums), steps=how.steps + (1,) * len(sums))
        n_arrays += len(sums)
    how = _own(how, n_arrays)
    if how.total:
        args = (how.inner, how.total, how.rows, *how.strides, *pointers([*grads, *partials, *([] if in_place else sums)]))
        kernel = _kernel(structure, len(grads), len(partials), first.dtype, in_place, how.steps)
        if how.total < PARALLEL_MIN_ELEMENTS:
            kernel.call(0, how.rows, *args)
        else:
            key = (kernel, how.total, how.rows)
            choice = _splitting.get(key) or _splitting.setdefault(key, SplitChoice())
            choice.run(min(threads_now(), how.rows),
                       lambda n_threads: run_rows(kernel.call, 0, how.rows, n_threads, args))
    return sums


def gradient_sums_command(grads: list, partials: list, structure: tuple, sums: list | None = None):
    """The native runner's `Command` (`minflux.runtime.native_runner`) for ``gradient_sums(grads,
    partials, structure, in_place=True)`` (or, given ``sums``, ``sums=sums``), or None where that has
    no elements; where the call splits its rows over threads, the command's rows may run in shares at
    once (``rows``).

    >>> g, p = [np.full(3, 2.0)], [np.arange(3.0)]
    >>> gradient_sums_command(g, p, (((0, 0),),)).words[3:8]
    [0, 1, 1024, 3, 1]
    """
    written = sums or [partials[terms[0][1]] for terms in structure]
    arrays = [*grads, *partials, *(sums or [])]
    how = _own(walk(grads, partials, written), len(arrays))
    if how is None or not how.total or 5 + len(how.strides) + len(arrays) > MAX_KERNEL_ARGUMENTS:
        return None
    kernel = _kernel(structure, len(grads), len(partials), grads[0].dtype, sums is None, how.steps)
    command = kernel_words(function_address(kernel.call), [0, how.rows, how.inner, how.total, how.rows, *how.strides],
                           pointers(arrays))
    return command._replace(rows=how.rows) if how.total >= PARALLEL_MIN_ELEMENTS else command


def _own(how: Walk | None, n_arrays: int) -> Walk | None:
    """``how`` for the kernel's own ``n_arrays`` arrays (an in-place kernel writes into a partial,
    which the walk lists once more as written)."""
    if how is None or how.steps is None:
        return how
    return how._replace(strides=how.strides[:n_arrays], steps=how.steps[:n_arrays])
