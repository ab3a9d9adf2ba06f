"""The matrix product every minflux operation calls: one place that decides its threads.

BLAS runs on one thread in a minflux process (`minflux.compiler.threads`): OpenBLAS's own workers
spin while they wait for the next product, which on a busy machine costs many times the work. A
product large enough to pay for a second thread is instead split into column (or row) blocks that
run at once on minflux's sleeping worker pool (over the cores other work leaves free,
`minflux.compiler.threads.threads_now`), each block one single-threaded BLAS call writing its part
of the result. Small products, batched products and non-numpy arrays go straight to the array
module's ``matmul``.

>>> import numpy as np
>>> a, b = np.ones((64, 512), np.float32), np.ones((512, 1024), np.float32)
>>> bool((matmul(a, b) == 512).all())
True
"""
from __future__ import annotations

import numpy as np

from .backend import get_array_module
from .compiler.row_pool import run_rows
from .compiler.threads import threads_now
from .schedule import operation

__all__ = ["matmul", "PARALLEL_MIN_MULTIPLY_ADDS"]

PARALLEL_MIN_MULTIPLY_ADDS = 1 << 27
"""Products with fewer multiply-adds than this run on one thread. Measured on two idle cores (CPU time
of the split product against one BLAS call): 50-105 million multiply-adds split 1.3-1.4x faster for
1.24-1.28x the CPU, 157-202 million 1.6-1.9x faster for 1.01-1.10x, 20 billion 1.96x faster for 1.01x.
A default that costs more CPU than one thread is not the fast setting on a busy machine, so only
products from 2^27 split."""

_BLOCK = 64   # columns (or rows) per unit of work: whole register tiles of the GEMM kernels


@operation
def matmul(a, b):
    """``a @ b`` as the array module computes it, with large 2-D numpy products split over threads.

    >>> import numpy as np
    >>> matmul(np.eye(2), np.array([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    xp = get_array_module(a, b, op="mf.matmul (@)")
    if xp is not np or a.ndim != 2 or b.ndim != 2:
        return xp.matmul(a, b)
    m, k = a.shape
    n = b.shape[1]
    n_threads = threads_now() if m * n * k >= PARALLEL_MIN_MULTIPLY_ADDS else 1
    by_columns = n >= m
    blocks = -(-(n if by_columns else m) // _BLOCK)
    if n_threads == 1 or blocks < 2 or k != b.shape[0]:
        return np.matmul(a, b)
    out = np.empty((m, n), np.result_type(a, b))
    if by_columns:
        def share(j0, j1):
            np.matmul(a, b[:, j0 * _BLOCK:j1 * _BLOCK], out=out[:, j0 * _BLOCK:j1 * _BLOCK])
    else:
        def share(i0, i1):
            np.matmul(a[i0 * _BLOCK:i1 * _BLOCK], b, out=out[i0 * _BLOCK:i1 * _BLOCK])
    run_rows(share, 0, blocks, n_threads, ())
    return out
