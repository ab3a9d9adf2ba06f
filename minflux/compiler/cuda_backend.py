"""The CUDA backend of the scalar-function compiler: fused mixed-mode kernels for CuPy arrays.

The transformed IR of a call (`minflux.compiler.dual`) is printed as one CUDA C device function
(`minflux.compiler.cuda_codegen`): real branches and loops, dual variables as registers. A CuPy
``ElementwiseKernel`` calls it once per element, so CuPy broadcasts the arguments (including 0-d
arrays for Python numbers) and one pass over memory writes every output and every partial.
`minflux.compiler.compiled_function` selects this backend when the arguments are CuPy arrays.

Kernels are cached per transformed function by the compiled function that owns them; CuPy caches the compiled binaries on disk
(``~/.cupy/kernel_cache``) by source text, so a new process only pays for NVRTC once per kernel.
``MINFLUX_CUDA_FAST_MATH=1`` (or `set_fast_math`) uses the float32 hardware intrinsics whose error
the CUDA guide documents (see `minflux.compiler.cuda_codegen`); by default the accurate CUDA math
library functions are used.

>>> from minflux.compiler.frontend import parse
>>> from minflux.compiler.kinds import infer_kinds
>>> from minflux.compiler.dual import differentiate
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
import re
import threading

import numpy as np

from ..runtime import settings
from .cuda_codegen import HELPERS, CKernel, generate
from .dtypes import kind_dtype
from .ir import format_function

__all__ = ["build_kernel", "get_fast_math", "kernel_source", "launch", "set_fast_math"]

_lock = threading.Lock()


def set_fast_math(enabled: bool) -> None:
    """Use float32 CUDA intrinsics (``__expf``, ``__logf``, ``__fdividef``) in new kernels.

    >>> set_fast_math(True); get_fast_math()
    True
    >>> set_fast_math(False)
    """
    settings.set("cuda_fast_math", bool(enabled))


def get_fast_math() -> bool:
    """Whether new CUDA kernels use the float32 fast-math intrinsics.

    >>> isinstance(get_fast_math(), bool)
    True
    """
    return settings.get("cuda_fast_math")


def _kernel_name(fn, float_type: str, fast: bool) -> str:
    text = format_function(fn) + float_type + str(fast)
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    return re.sub(r"\W", "_", f"minflux_{fn.name}_{digest}")


def kernel_source(dual, float_type: str, fast_math: bool | None = None) -> CKernel:
    """The CUDA C of transformed function ``dual`` (a `DualFunction` or a typed IR `Function`).

    Its outputs are the primal outputs followed by the partials of ``dual.slots``.
    """
    fn = getattr(dual, "function", dual)
    fast = settings.get("cuda_fast_math") if fast_math is None else fast_math
    float_type = np.dtype(float_type).name
    return generate(fn, float_type, name=_kernel_name(fn, float_type, fast), fast_math=fast)


def _elementwise_kernel(ck: CKernel):
    import cupy

    in_params = ", ".join(f"{kind_dtype(k, ck.float_type).name} in{i}" for i, k in enumerate(ck.input_kinds))
    out_params = ", ".join(f"{kind_dtype(k, ck.float_type).name} out{i}" for i, k in enumerate(ck.output_kinds))
    call = ", ".join([f"in{i}" for i in range(len(ck.input_kinds))]
                     + [f"&out{i}" for i in range(len(ck.output_kinds))])
    # The __global__ kernel CuPy generates needs a name of its own (the device function has ck.name).
    return cupy.ElementwiseKernel(in_params, out_params, f"{ck.name}({call});", f"{ck.name}_kernel",
                                  preamble=HELPERS + "\n" + ck.source)


def build_kernel(dual, float_dtype):
    """The CuPy kernel of transformed function ``dual`` for one float type: ``(CKernel, kernel)``."""
    with _lock:
        ck = kernel_source(dual, np.dtype(float_dtype).name)
        return ck, _elementwise_kernel(ck)


def launch(built, arrays: list, float_dtype, shape: tuple) -> list:
    """Run a `build_kernel` result on CuPy ``arrays`` (of their kinds' dtypes); one array per output.

    Every output is a new CuPy array of ``shape``: the primal outputs, then the partials.
    """
    import cupy

    ck, kernel = built
    outs = [cupy.empty(shape, dtype=kind_dtype(k, float_dtype)) for k in ck.output_kinds]
    if not outs:
        return []
    kernel(*arrays, *outs)
    return outs
