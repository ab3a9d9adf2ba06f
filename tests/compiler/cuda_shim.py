"""Run generated CUDA C kernels on the CPU: a shim header, a loop harness and the system C compiler.

The CUDA backend's device functions use a handful of CUDA spellings (``__device__``,
``__forceinline__``, ``__int_as_float``, ``__expf``, ...). `SHIM` defines them for a C99 compiler
(the intrinsics as their accurate libm counterparts), and `build` wraps every kernel in a loop over
flat arrays, compiles all of them in one shared library and loads it with ctypes. `HostKernels.run`
then broadcasts the arguments with numpy and calls the loop, so the exact text that CuPy compiles is
checked against the numpy backend without a GPU. This is a test instrument: it is not fast.

>>> from minflux.compiler.ir import Function, Assign, Call, Var, Return
>>> from minflux.compiler.kinds import infer_kinds
>>> from minflux.compiler.cuda_codegen import generate
>>> import numpy as np
>>> fn = infer_kinds(Function("sq", ["x"], [Assign("t", Call("multiply", (Var("x"), Var("x")))),
...                                         Return((Var("t"),))], temps={"t"}), ["f"])
>>> kernels = build([generate(fn, "float64", name="sq")])          # doctest: +SKIP
>>> kernels.run("sq", np.array([1.0, 3.0]))                          # doctest: +SKIP
(array([1., 9.]),)
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile
from typing import Sequence

import numpy as np

from minflux.compiler.cuda_codegen import HELPERS, CKernel
from minflux.compiler.dtypes import kind_dtype

__all__ = ["SHIM", "CompilerNotFound", "HostKernels", "build", "c_compiler", "harness_source"]

SHIM = r"""/* minflux CUDA shim: the CUDA spellings used by generated kernels, for a C99 compiler */
#include <math.h>
#include <stdbool.h>
#include <string.h>
#define __device__
#define __forceinline__ inline
/* CUDA names glibc may declare itself are macros onto host functions */
static inline float minflux_host_int_as_float(int i) { float f; memcpy(&f, &i, sizeof f); return f; }
static inline double minflux_host_longlong_as_double(long long i) { double d; memcpy(&d, &i, sizeof d); return d; }
/* fast-math intrinsics: their accurate counterparts (the device error bounds are documented in
   minflux/compiler/cuda_codegen.py and cannot be reproduced on the host) */
static inline float minflux_host_expf(float x) { return expf(x); }
static inline float minflux_host_logf(float x) { return logf(x); }
static inline float minflux_host_fdividef(float a, float b) { return a / b; }
#define __int_as_float minflux_host_int_as_float
#define __longlong_as_double minflux_host_longlong_as_double
#define __expf minflux_host_expf
#define __logf minflux_host_logf
#define __fdividef minflux_host_fdividef
"""

class CompilerNotFound(RuntimeError):
    """No C compiler is available to build generated kernels on the host."""


def c_compiler() -> str | None:
    """The C compiler to use: ``$CC`` when set, else ``cc`` or ``gcc`` on the path, else None.

    >>> c_compiler() is None or isinstance(c_compiler(), str)
    True
    """
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc) or cc
    return shutil.which("cc") or shutil.which("gcc")


def harness_source(kernels: Sequence[CKernel]) -> str:
    """One C translation unit: the shim, the helpers, every kernel and a loop ``run_NAME`` for each."""
    parts = [SHIM, HELPERS]
    for k in kernels:
        parts.append(k.source)
        ins = [f"const {t} *restrict in{i}" for i, t in enumerate(k.input_types())]
        outs = [f"{t} *restrict out{i}" for i, t in enumerate(k.output_types())]
        call = ", ".join([f"in{i}[i]" for i in range(len(ins))] + [f"&out{i}[i]" for i in range(len(outs))])
        parts.append(f"void run_{k.name}({', '.join(['long long n'] + ins + outs)}) {{\n"
                     f"    long long i;\n    for (i = 0; i < n; ++i) {k.name}({call});\n}}\n")
    return "\n".join(parts)


class HostKernels:
    """Generated kernels compiled for the host; `run` calls one on broadcast numpy arrays."""

    def __init__(self, library: ctypes.CDLL, kernels: Sequence[CKernel], source: str):
        self.library = library
        self.kernels = {k.name: k for k in kernels}
        self.source = source

    def run(self, name: str, *args) -> tuple:
        """Evaluate kernel ``name`` elementwise over ``args`` (numpy broadcasting); one array per output."""
        k = self.kernels[name]
        if len(args) != len(k.input_kinds):
            raise TypeError(f"kernel {name} takes {len(k.input_kinds)} arguments, got {len(args)}")
        dtypes = [kind_dtype(kind, k.float_type) for kind in k.input_kinds]
        arrays = [np.asarray(a).astype(d, copy=False) for a, d in zip(args, dtypes)]
        shape = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
        flat = [np.ascontiguousarray(np.broadcast_to(a, shape)).reshape(-1) for a in arrays]
        outs = [np.empty(shape, dtype=kind_dtype(kind, k.float_type)) for kind in k.output_kinds]
        fn = getattr(self.library, f"run_{name}")
        fn.restype = None
        n = int(np.prod(shape, dtype=np.int64))
        pointers = [a.ctypes.data_as(ctypes.c_void_p) for a in flat]
        pointers += [o.ctypes.data_as(ctypes.c_void_p) for o in outs]
        fn(ctypes.c_longlong(n), *pointers)
        return tuple(outs)


def build(kernels: Sequence[CKernel], workdir: str | None = None, flags: Sequence[str] = ()) -> HostKernels:
    """Compile ``kernels`` (with distinct names) into one shared library with the host C compiler.

    Raises `CompilerNotFound` without a compiler and ``RuntimeError`` with the compiler's messages
    and the numbered source when compilation fails.
    """
    cc = c_compiler()
    if cc is None:
        raise CompilerNotFound("no C compiler found: install gcc or clang, or set $CC")
    names = [k.name for k in kernels]
    if len(set(names)) != len(names):
        raise ValueError(f"kernel names must be distinct, got {names}")
    source = harness_source(kernels)
    workdir = workdir or tempfile.mkdtemp(prefix="minflux-cuda-shim-")
    c_file = os.path.join(workdir, "kernels.c")
    so_file = os.path.join(workdir, "kernels.so")
    with open(c_file, "w") as f:
        f.write(source)
    # No contraction into FMA and no fast-math, so the host result is the IEEE result of the C text.
    cmd = [cc, "-std=c99", "-O1", "-ffp-contract=off", "-fno-fast-math", "-fPIC", "-shared",
           *flags, c_file, "-o", so_file, "-lm"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        numbered = "\n".join(f"{i + 1:5d}  {line}" for i, line in enumerate(source.splitlines()))
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr}\n--- source ---\n{numbered}")
    return HostKernels(ctypes.CDLL(so_file), kernels, source)
