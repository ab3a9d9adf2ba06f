"""MKL's GEMM for minflux's matrix products, when the ``mkl`` wheel is installed.

MKL multiplies faster than the OpenBLAS numpy ships on some CPUs and slower on others
(`benchmarks/gemm_providers.py`), so `minflux.matrix_product.matmul` hands it the 2-D float32 or
float64 products whose operands it can read in place (row-major or transposed, any leading
dimension) and at whose shapes it measured faster on this machine (`minflux.runtime.gemm_choice`);
everything else goes to numpy. ``pip install 'minflux[mkl]'`` installs it; ``MINFLUX_GEMM``
chooses: ``auto`` (the default: by measurement when MKL is installed), ``mkl`` (every product MKL
can read in place; an error when it is not installed) or ``numpy``.

MKL is loaded through its C interface with the sequential threading layer (minflux's own sleeping
pool splits large products; MKL's OpenMP workers would spin while they wait) and with conditional
numerical reproducibility on (``MKL_CBWR_Set(MKL_CBWR_AUTO)``), under which a product's bits do not
depend on where its arrays happen to lie in memory: an eager step and its compiled replay, whose
arrays lie elsewhere, agree to the bit.

>>> import numpy as np
>>> from minflux.runtime import gemm_provider
>>> a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 2))
>>> out = np.empty((2, 2))
>>> gemm_provider.gemm is None or gemm_provider.gemm(a, b, out)
True
>>> gemm_provider.gemm is None or out.tolist() == [[3.0, 3.0], [12.0, 12.0]]
True
"""
from __future__ import annotations

import ctypes
import numpy as np

from . import settings
from .native_runner import function_address
from .pointers import pointers

__all__ = ["gemm", "operand", "provider"]

_CHOICES = ("auto", "mkl", "numpy")
_THREADING_SEQUENTIAL = 1
_CBWR_AUTO, _CBWR_SUCCESS = 2, 0
_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
_INT_MAX = 2**31 - 1


class GemmUnavailable(ImportError):
    """``MINFLUX_GEMM`` asked for a library that cannot be loaded.

    >>> issubclass(GemmUnavailable, ImportError)
    True
    """


def _library_path() -> str | None:
    """Where the ``mkl`` wheel put ``libmkl_rt``, or None when it is not installed."""
    import importlib.metadata

    try:
        files = importlib.metadata.distribution("mkl").files or []
    except importlib.metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name.startswith("libmkl_rt.so"):
            return str(f.locate())
    return None


def operand(x, itemsize: int):
    """(CBLAS transpose flag, leading dimension) for reading 2-D ``x`` in place, or None.

    >>> import numpy as np
    >>> x = np.zeros((3, 4), np.float32)
    >>> operand(x, 4), operand(x.T, 4), operand(x[:, ::2], 4)
    ((111, 4), (112, 4), None)
    """
    rows, cols = x.shape
    s0, s1 = x.strides
    if s1 == itemsize and s0 % itemsize == 0 and s0 >= max(1, cols) * itemsize:
        return _NO_TRANS, s0 // itemsize
    if s0 == itemsize and s1 % itemsize == 0 and s1 >= max(1, rows) * itemsize:
        return _TRANS, s1 // itemsize
    return None


def _mkl_gemm(library: ctypes.CDLL):
    routines = {np.dtype(np.float32): (library.cblas_sgemm, ctypes.c_float),
                np.dtype(np.float64): (library.cblas_dgemm, ctypes.c_double)}
    for routine, scalar in routines.values():
        routine.restype = None
        routine.argtypes = [ctypes.c_int] * 6 + [scalar, ctypes.c_size_t, ctypes.c_int, ctypes.c_size_t,
                                                 ctypes.c_int, scalar, ctypes.c_size_t, ctypes.c_int]

    def gemm(a, b, out) -> bool:
        """``out[...] = a @ b`` for 2-D arrays of one float dtype; False (nothing written) when the
        dtypes or layouts are not ones MKL reads in place. ``gemm.addresses``: dtype -> the address of
        the CBLAS routine it calls (32-bit integers), for native callers."""
        dtype = out.dtype
        found = routines.get(dtype)
        if found is None or a.dtype != dtype or b.dtype != dtype or 0 in a.shape or 0 in out.shape:
            return False
        if not (a.flags.aligned and b.flags.aligned and out.flags.aligned and out.flags.writeable):
            return False
        size = dtype.itemsize
        la, lb, lc = operand(a, size), operand(b, size), operand(out, size)
        if la is None or lb is None or lc is None or lc[0] != _NO_TRANS:
            return False
        (m, k), n = a.shape, out.shape[1]
        if max(m, n, k, la[1], lb[1], lc[1]) > _INT_MAX:   # MKL's LP64 interface counts in 32 bits
            return False
        pa, pb, pc = pointers((a, b, out))
        routine, scalar = found
        routine(_ROW_MAJOR, la[0], lb[0], m, n, k, 1.0, pa, la[1], pb, lb[1], 0.0, pc, lc[1])
        return True

    gemm.addresses = {dtype: function_address(routine) for dtype, (routine, _) in routines.items()}
    return gemm


def _load(choice: str):
    if choice not in _CHOICES:
        raise GemmUnavailable(f"MINFLUX_GEMM={choice!r} is not one of {', '.join(_CHOICES)}; unset it for "
                              "the default (MKL when the mkl wheel is installed)")
    if choice == "numpy":
        return None, "numpy"
    path = _library_path()
    if path is None:
        if choice == "mkl":
            raise GemmUnavailable("MINFLUX_GEMM=mkl but the mkl wheel is not installed: pip install "
                                  "'minflux[mkl]', or unset MINFLUX_GEMM to use numpy's BLAS")
        return None, "numpy"
    library = ctypes.CDLL(path)
    layer = library.MKL_Set_Threading_Layer(_THREADING_SEQUENTIAL)
    reproducible = library.MKL_CBWR_Set(_CBWR_AUTO) == _CBWR_SUCCESS
    if layer != _THREADING_SEQUENTIAL or not reproducible:   # another user of this MKL set it up first
        if choice == "mkl":
            raise GemmUnavailable(f"MINFLUX_GEMM=mkl but {path} was already set up by another library "
                                  "(threaded or without reproducible results); unset MINFLUX_GEMM")
        return None, "numpy"
    return _mkl_gemm(library), "mkl"


def __getattr__(name: str):
    """``gemm(a, b, out) -> bool`` (None when numpy multiplies), ``provider`` (the library's name) and
    ``choice`` (``MINFLUX_GEMM``), loaded at their first use: importing minflux loads no library and
    sets up none. With ``auto`` the shapes MKL multiplies are chosen by measurement
    (`minflux.runtime.gemm_choice`)."""
    if name not in ("gemm", "provider", "choice"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    chosen = settings.get("gemm")
    found, library = _load(chosen)
    globals().update(gemm=found, provider=library, choice=chosen)
    return globals()[name]
