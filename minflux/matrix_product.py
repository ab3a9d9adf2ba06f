"""The matrix product of `mf.matmul` (``@``): one place that decides its library and threads.

It multiplies ``@`` and its gradients, the row-masked product (`mf.row_masked_matmul`) and the
factored weight gradients (`minflux.product_gradient`). `mf.einsum`, `mf.tensordot`, `mf.dot` and
`mf.outer` (`minflux.ops.contractions`), the gradient of a product of stacks of matrices and the
products inside other ops (`mf.norm`'s singular directions, gradient clipping's ``vdot``) call the
array module directly: numpy's own library on BLAS's one thread, never MKL or minflux's pool.

2-D float products go to MKL when its wheel is installed and it measured faster than numpy's
OpenBLAS at their shape on this machine (`minflux.runtime.gemm_choice`), and to numpy's ``matmul``
otherwise.

BLAS runs on one thread in a minflux process (`minflux.runtime.threads`): OpenBLAS's own workers
spin while they wait for the next product, which on a busy machine costs many times the work. A
product large enough to pay for a second thread is instead split into column (or row) blocks that
run on minflux's sleeping worker pool (over the cores other work leaves free,
`minflux.runtime.threads.threads_now`), each block one single-threaded BLAS call writing its part
of the result; the blocks of a shape run one after the other where its first calls measured that
faster than at once (`minflux.runtime.split_choice`). Small products, batched products of matrices
and non-numpy arrays go straight to the array module's ``matmul``.

>>> import numpy as np
>>> a, b = np.ones((64, 512), np.float32), np.ones((512, 1024), np.float32)
>>> bool((matmul(a, b) == 512).all())
True
"""
from __future__ import annotations

import math

import numpy as np

from .backend import get_array_module
from .runtime.allocator import prepare_process
from .runtime.row_pool import run_rows
from .runtime.split_choice import SplitChoice
from .runtime.threads import get_num_threads, threads_now
from .runtime import gemm_provider, native_runner
from .runtime.pointers import pointers
from .runtime.gemm_choice import prefers_gemm
from .schedule import operation

__all__ = ["matmul", "PARALLEL_MIN_MULTIPLY_ADDS"]

PARALLEL_MIN_MULTIPLY_ADDS = 1 << 24
"""Products with fewer multiply-adds than this run on one thread; larger ones are cut into shares, which
run at once where their first calls measured that faster (`SplitChoice`) and one after the other
otherwise, at no measurable cost (0.97-1.01x one BLAS call, from 4 to 6,700 million multiply-adds).
Split against one BLAS call on two idle cores of a 2-core AMD EPYC (Zen 4, KVM), float32, wall time
and CPU time: 4 million multiply-adds 0.77x as fast for 1.83x the CPU (waking the worker costs more than
half the product saves), 10 million 1.09x faster for 1.38x, 26 million 1.44x for 1.17x, 53 million
1.66x for 1.08x, 105 million 1.78-1.80x for 1.02-1.05x. On a busy machine the shares run in turn
(`threads_now`), so the floor costs CPU only where a core is idle."""

_BLOCK = 64   # columns (or rows) per unit of work: whole register tiles of the GEMM kernels
_at_once: dict = {}   # (shape, dtype, library, shares) -> whether a cut product's shares gain from running at once


@operation(results="out")
def matmul(a, b, out=None):
    """``a @ b`` as the array module computes it, with large 2-D numpy products split over threads.

    Rows times one matrix (``a`` with three or more axes, ``b`` with two) is one 2-D product over all
    the rows. A large product is cut into as many shares as the thread budget
    (`minflux.get_num_threads`) allows, whatever the load, and the shares run on the threads free at
    the moment: its bits depend on its shape and the budget, never on how busy the machine is.
    ``out``, a C-contiguous numpy array of the result's shape and dtype, receives the product of a
    numpy matrix (or rows) times a matrix; elsewhere it is ignored and the result is new.

    >>> import numpy as np
    >>> matmul(np.eye(2), np.array([[1.0, 2.0], [3.0, 4.0]])).tolist()
    [[1.0, 2.0], [3.0, 4.0]]
    """
    xp = get_array_module(a, b, op="mf.matmul (@)")
    if xp is not np or b.ndim != 2 or a.ndim < 2 or a.shape[-1] != b.shape[0]:
        return xp.matmul(a, b)
    if a.ndim == 2:
        return _matmul_2d(a, b, out)
    if a.size == 0:
        return xp.matmul(a, b)
    rows = _matmul_2d(a.reshape(-1, a.shape[-1]), b, None if out is None else out.reshape(-1, b.shape[1]))
    return rows.reshape(*a.shape[:-1], b.shape[1])


def _blocks(m: int, n: int) -> int:
    return -(-(n if n >= m else m) // _BLOCK)


def _parts(m: int, n: int, shares: int) -> list:
    """The columns (``n >= m``) or rows of each of a product's ``shares``: whole blocks, as even as may be."""
    blocks = _blocks(m, n)
    return [slice(blocks * s // shares * _BLOCK, blocks * (s + 1) // shares * _BLOCK) for s in range(shares)]


def _shares(m: int, k: int, n: int) -> int:
    """How many threads' shares a product of ``m x k`` by ``k x n`` is cut into."""
    return min(get_num_threads(), _blocks(m, n)) if m * n * k >= PARALLEL_MIN_MULTIPLY_ADDS else 1


def _library(a, b, dtype):
    """MKL's gemm where it multiplies 2-D ``a @ b``, or None for numpy's matmul."""
    library = gemm_provider.gemm
    (m, k), n = a.shape, b.shape[1]
    if library is not None and not prefers_gemm(m, k, n, dtype, _column_major(a), _column_major(b)):
        return None
    return library


def _matmul_2d(a, b, out=None):
    (m, k), n = a.shape, b.shape[1]
    by_columns = n >= m
    prepare_process()               # BLAS on one thread and freed memory kept, from the first product
    shares = _shares(m, k, n)
    dtype = a.dtype if a.dtype is b.dtype else np.result_type(a, b)
    library = _library(a, b, dtype)
    if shares == 1 and library is None:
        return np.matmul(a, b) if out is None else np.matmul(a, b, out=out)
    if out is None:
        out = np.empty((m, n), dtype)
    if shares == 1:
        _product(library, a, b, out)
        return out
    parts = _parts(m, n, shares)
    errstate = np.geterr()

    def run(s0, s1):
        with np.errstate(**errstate):   # a worker thread starts from numpy's default error state
            for part in parts[s0:s1]:
                if by_columns:
                    _product(library, a, b[:, part], out[:, part])
                else:
                    _product(library, a[part], b, out[part])

    key = (m, k, n, dtype, library is None, shares)
    choice = _at_once.get(key) or _at_once.setdefault(key, SplitChoice())
    choice.run(threads_now(), lambda threads: run_rows(run, 0, shares, threads, ()))
    return out


def native_command(a, b, out, errstate: dict):
    """The native runner's `Command` (`minflux.runtime.native_runner`) for ``matmul(a, b, out=out)`` under
    numpy's ``errstate``: the same BLAS calls on the same operands as that call -- one, or for a product
    `matmul` splits, one per share of its columns (or rows), run at once where threads are free
    (``shares``) -- or None where they are not 2-D BLAS calls into ``out``. numpy's BLAS is checked as
    numpy checks it (the floating-point status flags its error state acts on); MKL's, called without
    numpy, is not.

    >>> import numpy as np
    >>> a, b, out = np.ones((4, 3)), np.ones((3, 5)), np.empty((4, 5))
    >>> command = native_command(a, b, out, np.geterr())
    >>> command is None or command.words[4:7]
    [4, 5, 3]
    """
    if not (a.__class__ is b.__class__ is out.__class__ is np.ndarray) or a.ndim != 2 or b.ndim != 2:
        return None
    (m, k), n = a.shape, b.shape[1]
    dtype = out.dtype
    if (b.shape[0] != k or out.shape != (m, n) or a.dtype != dtype or b.dtype != dtype or min(m, n, k) < 2
            or not (a.flags.aligned and b.flags.aligned and out.flags.c_contiguous)):
        return None
    if np.may_share_memory(out, a) or np.may_share_memory(out, b):   # numpy copies first; BLAS would not
        return None
    library = _library(a, b, dtype)
    shares = _shares(m, k, n)
    if shares == 1:
        return _gemm_command(library, a, b, out, errstate, (np.matmul, (a, b, out)))
    parts = []
    for part in _parts(m, n, shares):
        share = (a, b[:, part], out[:, part]) if n >= m else (a[part], b, out[part])
        if min(share[2].shape) < 2:   # numpy multiplies a single row or column by gemv, not gemm
            return None
        parts.append(_gemm_command(library, *share, errstate, None))
        if parts[-1] is None:
            return None
    return native_runner.sequence(*parts)._replace(redo=(_matmul_2d, (a, b, out)), shares=shares,
                                                   stops=tuple(p * native_runner.GEMM_WORDS for p in range(shares)))


def _gemm_command(library, a, b, out, errstate: dict, redo: tuple | None):
    """One BLAS call of ``library`` (None: numpy's) writing ``a @ b`` into ``out`` (rows of unit stride),
    or None where it cannot be made."""
    size = out.dtype.itemsize
    la, lb, lc = gemm_provider.operand(a, size), gemm_provider.operand(b, size), gemm_provider.operand(out, size)
    if la is None or lb is None or lc is None or out.strides[1] != size:
        return None
    pa, pb, pc = pointers((a, b, out))
    if library is not None:
        found, flags = (library.addresses.get(out.dtype), 32), 0
    else:
        found, flags = native_runner.numpy_gemm(out.dtype), native_runner.fp_flags(errstate)
        if pa == pb:   # numpy multiplies a matrix by its own transpose with syrk
            return None
    if found is None or found[0] is None or flags is None:
        return None
    address, width = found
    variant = native_runner.GEMM_VARIANTS.index((out.dtype, width))
    (m, k), n = a.shape, b.shape[1]
    return native_runner.gemm_words(variant, address, la[0], lb[0], m, n, k, pa, la[1], pb, lb[1], pc, lc[1], flags,
                                    redo)


def _matmul_command(args: tuple, kwargs: dict, errstate: dict):
    out = kwargs.get("out", args[2] if len(args) > 2 else None)
    if out is None or len(args) < 2:
        return None
    a, b = args[:2]
    if a.__class__ is np.ndarray and a.ndim > 2 and out.__class__ is np.ndarray and out.ndim == a.ndim:
        if not (a.flags.c_contiguous and out.flags.c_contiguous):   # rows times one matrix, as matmul does it
            return None
        a, out = a.reshape(-1, a.shape[-1]), out.reshape(-1, out.shape[-1])
    return native_command(a, b, out, errstate)


def _multiply_adds(a_shape: tuple, b_shape: tuple) -> int:
    """The multiply-adds of ``a @ b`` for operands of these shapes, ``a``'s leading axes and ``b``'s
    columns (`minflux.schedule.native_groups.apart`).

    >>> _multiply_adds((64, 512), (512, 2048))
    67108864
    """
    return math.prod(a_shape) * (b_shape[-1] if len(b_shape) > 1 else 1)


matmul.__wrapped_operation__.native_command = _matmul_command   # what a recording of matmul calls
matmul.__wrapped_operation__.multiply_adds = _multiply_adds


def _column_major(x) -> bool:
    flags = x.flags
    return flags.f_contiguous and not flags.c_contiguous


def _product(library, a, b, out) -> None:
    if library is None or not library(a, b, out):
        np.matmul(a, b, out=out)
