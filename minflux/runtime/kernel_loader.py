"""Loading a generated kernel module: from memory, from its object code on disk, or compiled by numba now.

A kernel is a generated Python module whose ``kernel`` is a numba ``cfunc`` on raw pointers,
``kernel(r0, r1, inner, total, rows, row strides..., pointers...)``. `load_kernel` keys it by its
source, what else its generator says shapes its machine code, the LLVM options, the library
versions and the host CPU (`kernel_cache.cache_key`); it links the object code saved under that
key in the private kernel directory (`cache_directory.kernel_directory`) when it is there and
trusted, and otherwise writes the module next to it, lets numba compile it and saves its object
code for the next process. The elementwise compiler's kernels, the tape's node-gradient kernels
and the layer-norm row kernels are all loaded here.

>>> import numpy as np
>>> source = '''
... import numpy as np
... from numba import carray, cfunc, types
... @cfunc(types.void(types.int64, types.int64, types.int64, types.int64, types.int64,
...                   types.CPointer(types.float64)))
... def kernel(r0, r1, inner, total, rows, p):
...     x = carray(p, (total,))
...     for i in range(r0, r1):
...         x[i] = 2.0 * i
... '''
>>> x = np.zeros(3)
>>> load_kernel(source, 1).call(0, 3, 3, 3, 1, x.ctypes.data)
>>> x.tolist()
[0.0, 2.0, 4.0]
"""
from __future__ import annotations

import atexit
import importlib.util
import shutil
import sys
import tempfile
from pathlib import Path

from ..files import write_atomically
from . import kernel_cache
from .cache_directory import kernel_directory

__all__ = ["LLVM_OPTIONS", "Kernel", "load_kernel"]


class Kernel:
    """A loaded kernel: ``call(r0, r1, inner, total, rows, *pointers)`` and where it came from.

    >>> Kernel("key", print).compiled_here
    False
    """

    def __init__(self, key: str, call, module=None):
        self.key = key
        self.call = call
        self.module = module          # the generated module when compiled in this process
        self.has_loops = False        # loops run in row chunks, so that Ctrl-C is seen between them

    @property
    def compiled_here(self) -> bool:
        """True when numba compiled it in this process, False when loaded as object code."""
        return self.module is not None

    def assembly(self) -> str:
        """The machine code (only for a kernel compiled in this process)."""
        if self.module is None:
            raise ValueError("the kernel was loaded from the disk cache as object code")
        return self.module.kernel._library.get_asm_str()


_loaded: dict = {}


# LLVM's loop vectoriser gives up on a loop that needs many runtime checks that its pointers do not
# overlap; a dual kernel with many partials has a dozen or more output streams, and compiled as
# scalar code it runs about 5x slower. The limit is a process-wide LLVM option, set once.
LLVM_OPTIONS = ("-vectorize-memory-check-threshold=1024",)
_llvm_configured = False


def _configure_llvm() -> None:
    global _llvm_configured
    if not _llvm_configured:
        import llvmlite.binding as llvm

        for option in LLVM_OPTIONS:
            llvm.set_option("minflux", option)
        _llvm_configured = True


def _compile(source: str, key: str, directory: Path):
    _configure_llvm()
    path = directory / f"{key}.py"
    try:
        write_atomically(path, source, mode=0o600)   # always our text: the module is executed
    except OSError:
        directory = Path(tempfile.mkdtemp(prefix="minflux-kernels-"))
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        path = directory / f"{key}.py"
        write_atomically(path, source, mode=0o600)
    spec = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    try:
        spec.loader.exec_module(module)   # numba compiles the cfunc here
    except BaseException:
        del sys.modules[key]
        raise
    try:
        kernel_cache.save(directory, key, module.kernel)
    except OSError:
        pass
    return module


def load_kernel(source: str, n_pointers: int, n_strides: int = 0, generator: str = "") -> Kernel:
    """The kernel of a generated module: from memory, from object code on disk, or compiled now.

    ``generator`` is what besides ``source`` decides the kernel's machine code (a version of the code
    that generated it and of the modules the source imports), so that a change there is a new key.
    """
    key = kernel_cache.cache_key(f"{source}\n# llvm {' '.join(LLVM_OPTIONS)}\n# generator {generator}")
    kernel = _loaded.get(key)
    if kernel is None:
        directory = kernel_directory()
        try:
            call = kernel_cache.load(directory, key, n_pointers, n_strides)
        except Exception:  # an unusable cache entry (another platform, a broken file): recompile
            call = None
        if call is not None:
            kernel = Kernel(key, call)
        else:
            module = _compile(source, key, directory)
            kernel = Kernel(key, kernel_cache.prototype(n_pointers, n_strides)(module.kernel.address), module)
        _loaded[key] = kernel
    return kernel
