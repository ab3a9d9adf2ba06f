"""Compiled row kernels for `layer_norm` on the CPU: the forward pass reads each row twice and writes it
once, the backward pass reads the gradient and the normalised row twice and writes once; numpy
spends about seven passes on the forward and eleven on the backward.

The kernels are generated modules compiled and cached like every elementwise kernel
(`minflux.runtime.kernel_loader.load_kernel`): C-callable functions on raw pointers, keyed on their
source, the library versions and the host, linked from the private kernel directory only after its
trust and SHA-256 checks. With ``MINFLUX_ELEMENTWISE=numpy`` (`mf.set_elementwise_backend`) they are
not used and `layer_norm` takes its array formula. Reductions may be reassociated (so they
vectorise); infinities and NaNs propagate as in numpy.

>>> import numpy as np
>>> usable(np.ones((2, 3)), np.ones(3)) == (get_elementwise_backend() == "numba")
True
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..backend import is_numpy_array
from ..compiler import get_elementwise_backend
from ..runtime.pointers import pointers

_HEADER = '''"""A minflux layer-norm row kernel ({name}, {float_type}). Do not edit."""
import numpy as np
from numba import carray, cfunc, types

_F = types.{float_type}
_SIG = types.void(types.int64, types.int64, types.int64, types.int64, types.int64,
                  {pointers})


@cfunc(_SIG, fastmath={{"reassoc", "contract", "nsz", "arcp"}}, error_model="numpy", boundscheck=False)
'''

# Each row is a slice of its own, and the elementwise passes use the row's mean and reciprocal in
# the kernel's float type: written over one flat array with float64 scalars, LLVM kept these loops
# scalar (3-4x slower at the HM-LSTM's rows of 128-513 columns).
_FORWARD = '''def kernel(r0, r1, columns, total, rows, px, pscale, pshift, peps, pout, pnormalised, preciprocal):
    xs, outs, normals = carray(px, (total,)), carray(pout, (total,)), carray(pnormalised, (total,))
    scale, shift = carray(pscale, (columns,)), carray(pshift, (columns,))
    reciprocal, eps = carray(preciprocal, (rows,)), carray(peps, (1,))[0]
    for r in range(r0, r1):
        x = xs[r * columns:(r + 1) * columns]
        out = outs[r * columns:(r + 1) * columns]
        normalised = normals[r * columns:(r + 1) * columns]
        total_r = 0.0
        for c in range(columns):
            total_r += x[c]
        mean = total_r / columns
        squares = 0.0
        for c in range(columns):
            d = x[c] - mean
            squares += d * d
        inverse = 1.0 / np.sqrt(squares / columns + eps)
        reciprocal[r] = inverse
        mean_f, inverse_f = np.{float_type}(mean), np.{float_type}(inverse)
        for c in range(columns):
            n = (x[c] - mean_f) * inverse_f
            normalised[c] = n
            out[c] = n * scale[c] + shift[c]
'''

_BACKWARD = '''def kernel(r0, r1, columns, total, rows, pg, pnormalised, preciprocal, pscale, pg_x, pg_scale,
           pg_shift):
    gs, normals, g_xs = carray(pg, (total,)), carray(pnormalised, (total,)), carray(pg_x, (total,))
    reciprocal, scale = carray(preciprocal, (rows,)), carray(pscale, (columns,))
    g_scale, g_shift = carray(pg_scale, (columns,)), carray(pg_shift, (columns,))
    for r in range(r0, r1):
        g = gs[r * columns:(r + 1) * columns]
        normalised = normals[r * columns:(r + 1) * columns]
        g_x = g_xs[r * columns:(r + 1) * columns]
        total_r = 0.0
        weighted = 0.0
        for c in range(columns):
            gn = g[c] * scale[c]
            total_r += gn
            weighted += gn * normalised[c]
        for c in range(columns):
            g_scale[c] += g[c] * normalised[c]
            g_shift[c] += g[c]
        mean_g, mean_gn = np.{float_type}(total_r / columns), np.{float_type}(weighted / columns)
        inverse = reciprocal[r]
        for c in range(columns):
            g_x[c] = inverse * (g[c] * scale[c] - mean_g - normalised[c] * mean_gn)
'''

# pointer types of the arguments after the five integers: "F" the kernel's float type, "D" float64
_FORWARD_POINTERS = "FFFDFFF"     # x, scale, shift, eps, out, normalised, reciprocal
_BACKWARD_POINTERS = "FFFFFDD"    # g, normalised, reciprocal, scale, g_x, g_scale, g_shift


def kernel_source(name: str, float_type: str) -> str:
    """The generated module of the ``"forward"`` or ``"backward"`` kernel for ``float_type``.

    >>> "def kernel(" in kernel_source("forward", "float32")
    True
    """
    codes = _FORWARD_POINTERS if name == "forward" else _BACKWARD_POINTERS
    pointers = ", ".join("types.CPointer(_F)" if c == "F" else "types.CPointer(types.float64)" for c in codes)
    header = _HEADER.format(name=name, float_type=float_type, pointers=pointers)
    return header + (_FORWARD if name == "forward" else _BACKWARD).format(float_type=float_type)


_lock = threading.Lock()


@functools.cache
def _kernels(dtype: np.dtype):
    from ..runtime.kernel_loader import load_kernel

    with _lock:   # keyed by the dtype itself: its .name costs 1.7 us, more than a small kernel's call
        return tuple(load_kernel(kernel_source(name, dtype.name), 7) for name in ("forward", "backward"))


def forward(x, scale, shift, eps: float, out, normalised, reciprocal) -> None:
    """Normalise the rows of contiguous ``x`` (rows, columns) into ``out``, keeping ``normalised``
    and the reciprocal deviations (``reciprocal``, one per row) for the backward pass."""
    rows, columns = x.shape
    eps_box = np.array([eps], np.float64)
    if rows:
        _kernels(x.dtype)[0].call(0, rows, columns, x.size, rows, *pointers(
            (x, scale, shift, eps_box, out, normalised, reciprocal)))


def backward(g, normalised, reciprocal, scale, g_x, g_scale, g_shift) -> None:
    """The input gradient into ``g_x``; the parameters' gradients are added into the float64
    ``g_scale`` and ``g_shift``."""
    rows, columns = g.shape
    if rows:
        _kernels(g.dtype)[1].call(0, rows, columns, g.size, rows, *pointers(
            (g, normalised, reciprocal, scale, g_x, g_scale, g_shift)))


def usable(*arrays) -> bool:
    """True when the row kernels apply: the numba elementwise backend is selected, every array is a
    numpy float32/float64 array of one dtype, and the rows are not empty."""
    dtype = arrays[0].dtype
    return (get_elementwise_backend() == "numba" and arrays[0].ndim > 0 and arrays[0].shape[-1] > 0
            and all(is_numpy_array(a) and a.dtype == dtype and dtype in (np.float32, np.float64)
                    for a in arrays))
