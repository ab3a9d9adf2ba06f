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

The kernels are generated modules compiled and cached like every elementwise kernel
(`minflux.runtime.kernel_loader.load_kernel`), one per term structure and float type.

>>> import numpy as np
>>> g = [np.array([1.0, 0.0]), np.array([2.0, 3.0])]
>>> p = [np.array([0.5, np.inf]), np.array([1.0, 1.0])]
>>> [s.tolist() for s in gradient_sums(g, p, (((0, 0), (1, 1)),))]
[[2.5, 3.0]]
"""
from __future__ import annotations

import threading

import numpy as np

from ..runtime.kernel_loader import load_kernel
from ..runtime.pointers import pointers
from ..runtime.row_pool import run_rows
from ..runtime.threads import PARALLEL_MIN_ELEMENTS, threads_now

__all__ = ["gradient_sums", "kernel_source"]

_ROW = 1024   # elements per unit of work when a large sum splits over threads

_HEADER = '''"""A minflux node-gradient kernel ({float_type}). Do not edit."""
import math
import numpy as np
from numba import carray, cfunc, types

_F = types.{float_type}
_ZERO = np.{float_type}(0.0)
_SIG = types.void(types.int64, types.int64, types.int64, types.int64, types.int64,
                  {pointers})


@cfunc(_SIG, error_model="numpy", boundscheck=False)
'''


def kernel_source(structure: tuple, n_grads: int, n_partials: int, float_type: str,
                  in_place: bool = False) -> str:
    """The generated module for ``structure``: per sum, its ``(gradient, partial)`` terms in order;
    ``in_place`` stores each sum over its first partial instead of into an output array.

    >>> print(kernel_source((((0, 0), (0, 1)),), 1, 2, "float32").split("@cfunc")[1])  # doctest: +ELLIPSIS
    (_SIG, error_model="numpy", boundscheck=False)
    def kernel(_r0, _r1, _inner, _total, _rows, _pg0, _pp0, _pp1, _pq0):
    ...
            _t = _g0 * _p
            if not math.isfinite(_t) and (_g0 == 0 or _p == 0):
                _t = _ZERO
            _s = _s + _t
            q0[_i] = _s
    <BLANKLINE>
    """
    names = [f"_pg{j}" for j in range(n_grads)] + [f"_pp{j}" for j in range(n_partials)] + \
        ([] if in_place else [f"_pq{j}" for j in range(len(structure))])
    lines = [f"def kernel(_r0, _r1, _inner, _total, _rows, {', '.join(names)}):",
             "    _lo = _r0 * _inner",
             "    _hi = min(_r1 * _inner, _total)"]
    # each array sliced to the rows and indexed from zero: indices LLVM can see are never negative
    # (so never wrapped around) are what lets it vectorise the loop, 5x faster here
    lines += [f"    {name[2:]} = carray({name}, (_total,))[_lo:_hi]" for name in names]
    lines.append("    for _i in range(_hi - _lo):")
    used = sorted({g for terms in structure for g, _ in terms})
    lines += [f"        _g{g} = g{g}[_i]" for g in used]
    for q, terms in enumerate(structure):
        for n, (g, p) in enumerate(terms):
            lines += [f"        _p = p{p}[_i]",
                      f"        _t = _g{g} * _p",
                      f"        if not math.isfinite(_t) and (_g{g} == 0 or _p == 0):",
                      "            _t = _ZERO",
                      "        _s = _t" if n == 0 else "        _s = _s + _t"]
        # a partial belongs to one sum and is read before its sum is stored, at the same element
        lines.append(f"        p{terms[0][1]}[_i] = _s" if in_place else f"        q{q}[_i] = _s")
    header = _HEADER.format(float_type=float_type, pointers=", ".join(["types.CPointer(_F)"] * len(names)))
    return header + "\n".join(lines) + "\n"


_kernels: dict = {}
_lock = threading.Lock()


def _kernel(structure: tuple, n_grads: int, n_partials: int, dtype: np.dtype, in_place: bool):
    key = (structure, n_grads, n_partials, dtype, in_place)   # the dtype, not its .name: 1.7 us a read
    kernel = _kernels.get(key)
    if kernel is None:
        source = kernel_source(structure, n_grads, n_partials, dtype.name, in_place)
        with _lock:
            kernel = _kernels[key] = load_kernel(source, n_grads + n_partials + (0 if in_place else len(structure)))
    return kernel


def gradient_sums(grads: list, partials: list, structure: tuple, in_place: bool = False) -> list:
    """Sum ``grads[g] * partials[p]`` over each sum's terms ``structure[q] = ((g, p), ...)``.

    Every array must be a C-contiguous numpy array of one shape and one float dtype (float32 or
    float64); every partial must appear in one term. Returns one new array per sum, or with
    ``in_place`` each sum's first partial, overwritten with the sum (for partials no one else holds).

    >>> g, p = [np.full(3, 2.0)], [np.arange(3.0), np.ones(3)]
    >>> [s.tolist() for s in gradient_sums(g, p, (((0, 0), (0, 1)), ((0, 1),)))]
    [[2.0, 4.0, 6.0], [2.0, 2.0, 2.0]]
    """
    first = partials[0]
    dtype, total = first.dtype, first.size
    sums = [partials[terms[0][1]] for terms in structure] if in_place else \
        [np.empty(first.shape, dtype) for _ in structure]
    if total:
        rows = -(-total // _ROW)
        args = (_ROW, total, rows, *pointers(grads), *pointers(partials), *([] if in_place else pointers(sums)))
        kernel = _kernel(structure, len(grads), len(partials), dtype, in_place)
        n_threads = min(threads_now(), rows) if total >= PARALLEL_MIN_ELEMENTS else 1
        run_rows(kernel.call, 0, rows, n_threads, args)
    return sums
