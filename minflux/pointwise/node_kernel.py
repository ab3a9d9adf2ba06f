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

import numpy as np

from ..runtime.kernel_loader import load_ir_kernel
from ..runtime.native_runner import MAX_KERNEL_ARGUMENTS, function_address, kernel_words
from ..runtime.pointers import pointers
from ..runtime.row_pool import run_rows
from ..runtime.threads import PARALLEL_MIN_ELEMENTS, threads_now

__all__ = ["gradient_sums", "kernel_ir"]

_ROW = 1024   # elements per unit of work when a large sum splits over threads

_TYPES = {"float32": "float", "float64": "double"}


def kernel_ir(structure: tuple, n_grads: int, n_partials: int, float_type: str, in_place: bool = False) -> str:
    """The LLVM IR of the kernel for ``structure``: per sum, its ``(gradient, partial)`` terms in
    order; ``in_place`` stores each sum over its first partial instead of into an output array.

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
    params = ", ".join(["i64 %r0", "i64 %r1", "i64 %inner", "i64 %total", "i64 %rows"] + [f"ptr {n}" for n in names])
    body = []
    for g in sorted({g for terms in structure for g, _ in terms}):
        body += [f"  %g{g}.at = getelementptr {t}, ptr %g{g}.lo, i64 %i", f"  %g{g}.v = load {t}, ptr %g{g}.at",
                 f"  %g{g}.zero = fcmp oeq {t} %g{g}.v, 0.0"]
    for q, terms in enumerate(structure):
        for n, (g, p) in enumerate(terms):
            v = f"{q}.{n}"
            body += [f"  %p{v}.at = getelementptr {t}, ptr %p{p}.lo, i64 %i",
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
        target = f"%p{terms[0][1]}.lo" if in_place else f"%q{q}.lo"
        body += [f"  %o{q}.at = getelementptr {t}, ptr {target}, i64 %i", f"  store {t} {total}, ptr %o{q}.at"]
    bases = [f"  {n}.lo = getelementptr {t}, ptr {n}, i64 %lo" for n in names]
    lines = [f"; a minflux node-gradient kernel ({float_type})", f"define void @minflux_node_kernel({params}) {{",
             "entry:", "  %lo = mul i64 %r0, %inner", "  %end = mul i64 %r1, %inner",
             "  %short = icmp slt i64 %total, %end", "  %hi = select i1 %short, i64 %total, i64 %end",
             "  %n = sub i64 %hi, %lo", *bases, "  %some = icmp sgt i64 %n, 0",
             "  br i1 %some, label %loop, label %done", "loop:", "  %i = phi i64 [0, %entry], [%i.next, %loop]",
             *body, "  %i.next = add i64 %i, 1", "  %more = icmp slt i64 %i.next, %n",
             "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}",
             f"declare {t} @llvm.fabs.{_TAG[t]}({t})"]
    return "\n".join(lines) + "\n"


_TAG = {"float": "f32", "double": "f64"}
_kernels: dict = {}
_lock = threading.Lock()


def _kernel(structure: tuple, n_grads: int, n_partials: int, dtype: np.dtype, in_place: bool):
    key = (structure, n_grads, n_partials, dtype, in_place)   # the dtype, not its .name: 1.7 us a read
    kernel = _kernels.get(key)
    if kernel is None:
        ir = kernel_ir(structure, n_grads, n_partials, dtype.name, in_place)
        with _lock:
            kernel = _kernels[key] = load_ir_kernel(ir, "minflux_node_kernel",
                                                    n_grads + n_partials + (0 if in_place else len(structure)))
    return kernel


def gradient_sums(grads: list, partials: list, structure: tuple, in_place: bool = False,
                  sums: list | None = None) -> list:
    """Sum ``grads[g] * partials[p]`` over each sum's terms ``structure[q] = ((g, p), ...)``.

    Every array must be a C-contiguous numpy array of one shape and one float dtype (float32 or
    float64); every partial must appear in one term. Returns one new array per sum (or ``sums``, written),
    or with ``in_place`` each sum's first partial, overwritten with the sum (for partials no one else holds).

    >>> g, p = [np.full(3, 2.0)], [np.arange(3.0), np.ones(3)]
    >>> [s.tolist() for s in gradient_sums(g, p, (((0, 0), (0, 1)), ((0, 1),)))]
    [[2.0, 4.0, 6.0], [2.0, 2.0, 2.0]]
    """
    first = partials[0]
    dtype, total = first.dtype, first.size
    if in_place:
        sums = [partials[terms[0][1]] for terms in structure]
    elif sums is None:
        sums = [np.empty(first.shape, dtype) for _ in structure]
    if total:
        rows = -(-total // _ROW)
        args = (_ROW, total, rows, *pointers(grads), *pointers(partials), *([] if in_place else pointers(sums)))
        kernel = _kernel(structure, len(grads), len(partials), dtype, in_place)
        n_threads = min(threads_now(), rows) if total >= PARALLEL_MIN_ELEMENTS else 1
        run_rows(kernel.call, 0, rows, n_threads, args)
    return sums


def gradient_sums_command(grads: list, partials: list, structure: tuple, sums: list | None = None):
    """The native runner's `Command` (`minflux.runtime.native_runner`) for ``gradient_sums(grads,
    partials, structure, in_place=True)`` (or, given ``sums``, ``sums=sums``), or None where that
    splits over threads or has no elements.

    >>> g, p = [np.full(3, 2.0)], [np.arange(3.0)]
    >>> gradient_sums_command(g, p, (((0, 0),),)).words[3:8]
    [0, 1, 1024, 3, 1]
    """
    first = partials[0]
    total = first.size
    written = sums or []
    if not total or total >= PARALLEL_MIN_ELEMENTS or \
            5 + len(grads) + len(partials) + len(written) > MAX_KERNEL_ARGUMENTS:
        return None
    rows = -(-total // _ROW)
    kernel = _kernel(structure, len(grads), len(partials), first.dtype, sums is None)
    return kernel_words(function_address(kernel.call), [0, rows, _ROW, total, rows],
                        pointers([*grads, *partials, *written]))
