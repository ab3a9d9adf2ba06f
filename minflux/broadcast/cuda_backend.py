"""The CUDA backend of the broadcast compiler: fused mixed-mode kernels for CuPy arrays.

The transformed IR of a call (`minflux.broadcast.dual`) is printed as one CUDA C device function
(`minflux.broadcast.cuda_codegen`): real branches and loops, dual variables as registers. A CuPy
``ElementwiseKernel`` calls it once per element, so CuPy broadcasts the arguments (including 0-d
arrays for Python numbers) and one pass over memory writes every output and every partial.
`minflux.broadcast.api` selects this backend when the arguments are CuPy arrays.

Kernels are cached per transformed function in memory; CuPy caches the compiled binaries on disk
(``~/.cupy/kernel_cache``) by source text, so a new process only pays for NVRTC once per kernel.
``MINFLUX_CUDA_FAST_MATH=1`` (or `set_fast_math`) uses the float32 hardware intrinsics whose error
the CUDA guide documents (see `minflux.broadcast.cuda_codegen`); by default the accurate CUDA math
library functions are used.

>>> from minflux.broadcast.frontend import parse
>>> from minflux.broadcast.kinds import infer_kinds
>>> from minflux.broadcast.dual import differentiate
>>> def f(x):
...     return x * x if x > 0 else -x
>>> dual = differentiate(infer_kinds(parse(f).function, ["f"]), [0])
>>> print(kernel_source(dual, "float32").function)         # doctest: +ELLIPSIS
static __device__ __forceinline__ void minflux_f_...(float in0, float *out0, float *out1) {
...
    if (m_t0) {
...
"""
from __future__ import annotations

import hashlib
import os
import re
import threading

import numpy as np

from .cuda_codegen import HELPERS, CKernel, dtype_of_kind, generate
from .ir import format_function

__all__ = ["get_fast_math", "kernel_source", "run", "set_fast_math"]

_fast_math = os.environ.get("MINFLUX_CUDA_FAST_MATH", "0").strip().lower() in ("1", "true", "yes")
_lock = threading.Lock()
_kernels: dict = {}  # (id(function), float type, fast) -> (function, kernel): the ref pins the id


def set_fast_math(enabled: bool) -> None:
    """Use float32 CUDA intrinsics (``__expf``, ``__logf``, ``__fdividef``) in new kernels.

    >>> set_fast_math(True); get_fast_math()
    True
    >>> set_fast_math(False)
    """
    global _fast_math
    _fast_math = bool(enabled)


def get_fast_math() -> bool:
    """Whether new CUDA kernels use the float32 fast-math intrinsics.

    >>> isinstance(get_fast_math(), bool)
    True
    """
    return _fast_math


def _kernel_name(fn, float_type: str, fast: bool) -> str:
    text = format_function(fn) + float_type + str(fast)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    return re.sub(r"\W", "_", f"minflux_{fn.name}_{digest}")


def kernel_source(dual, float_type: str, fast_math: bool | None = None) -> CKernel:
    """The CUDA C of transformed function ``dual`` (a `DualFunction` or a typed IR `Function`).

    Its outputs are the primal outputs followed by the partials of ``dual.slots``.
    """
    fn = getattr(dual, "function", dual)
    fast = _fast_math if fast_math is None else fast_math
    float_type = np.dtype(float_type).name
    return generate(fn, float_type, name=_kernel_name(fn, float_type, fast), fast_math=fast)


def _elementwise_kernel(ck: CKernel):
    import cupy

    in_params = ", ".join(f"{dtype_of_kind(k, ck.float_type)} in{i}" for i, k in enumerate(ck.input_kinds))
    out_params = ", ".join(f"{dtype_of_kind(k, ck.float_type)} out{i}" for i, k in enumerate(ck.output_kinds))
    call = ", ".join([f"in{i}" for i in range(len(ck.input_kinds))]
                     + [f"&out{i}" for i in range(len(ck.output_kinds))])
    # The __global__ kernel CuPy generates needs a name of its own (the device function has ck.name).
    return cupy.ElementwiseKernel(in_params, out_params, f"{ck.name}({call});", f"{ck.name}_kernel",
                                  preamble=HELPERS + "\n" + ck.source)


def _kernel_for(dual, float_dtype):
    fn = dual.function
    float_type = np.dtype(float_dtype).name
    key = (id(fn), float_type, _fast_math)
    hit = _kernels.get(key)
    if hit is not None and hit[0] is fn:
        return hit[1]
    with _lock:
        ck = kernel_source(dual, float_type)
        kernel = (ck, _elementwise_kernel(ck))
        _kernels[key] = (fn, kernel)
    return kernel


def run(dual, arrays: list, kinds: tuple, float_dtype, shape: tuple) -> list:
    """Run transformed kernel ``dual`` on CuPy arrays (of their kinds' dtypes); one array per output.

    Every output is a new CuPy array of ``shape``: the primal outputs, then the partials.
    """
    import cupy

    ck, kernel = _kernel_for(dual, float_dtype)
    float_type = np.dtype(float_dtype).name
    outs = [cupy.empty(shape, dtype=dtype_of_kind(k, float_type)) for k in ck.output_kinds]
    if not outs:
        return []
    kernel(*arrays, *outs)
    return outs
