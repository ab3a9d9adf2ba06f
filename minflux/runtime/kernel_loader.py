"""Loading a generated kernel: from memory, from its object code on disk, or compiled now (numba, or LLVM).

A kernel is a generated Python module whose ``kernel`` is a numba ``cfunc`` on raw pointers,
``kernel(r0, r1, inner, total, rows, row strides..., pointers...)``. `load_kernel` keys it by its
source, what else its generator says shapes its machine code, the LLVM options, the library
versions and the host CPU (`kernel_cache.cache_key`); it links the object code saved under that
key in the private kernel directory (`cache_directory.kernel_directory`) when it is there and
trusted, and otherwise writes the module next to it, lets numba compile it and saves its object
code for the next process. `load_ir_kernel` does the same for a kernel written as LLVM IR, which
LLVM compiles directly (llvmlite, without numba). The elementwise compiler's kernels, the tape's
node-gradient kernels and the layer-norm row kernels are all loaded here.

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
from .allocator import prepare_process
from .cache_directory import kernel_directory

__all__ = ["LLVM_OPTIONS", "Kernel", "load_ir_kernel", "load_kernel"]


class Kernel:
    """A loaded kernel: ``call(r0, r1, inner, total, rows, *pointers)`` and where it came from.

    >>> Kernel("key", print).compiled_here
    False
    """

    def __init__(self, key: str, call, assembly=None):
        self.key = key
        self.call = call
        self._assembly = assembly     # the machine code's text, when compiled in this process
        self.has_loops = False        # loops run in row chunks, so that Ctrl-C is seen between them

    @property
    def compiled_here(self) -> bool:
        """True when compiled in this process, False when loaded as object code."""
        return self._assembly is not None

    def assembly(self) -> str:
        """The machine code (only for a kernel compiled in this process)."""
        if self._assembly is None:
            raise ValueError("the kernel was loaded from the disk cache as object code")
        return self._assembly()


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
        prepare_process()   # a first kernel is minflux computing: from here on BLAS runs on one thread
        directory = kernel_directory()
        try:
            call = kernel_cache.load(directory, key, n_pointers, n_strides)
        except Exception:  # an unusable cache entry (another platform, a broken file): recompile
            call = None
        if call is not None:
            kernel = Kernel(key, call)
        else:
            module = _compile(source, key, directory)
            kernel = Kernel(key, kernel_cache.prototype(n_pointers, n_strides)(module.kernel.address),
                            module.kernel._library.get_asm_str)
        _loaded[key] = kernel
    return kernel


_machine = None


def _target_machine():
    global _machine
    if _machine is None:
        _machine = _new_target_machine()
    return _machine


def _new_target_machine():
    _configure_llvm()
    llvm = kernel_cache._binding()
    return llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3, codemodel="jitdefault")


def _compile_ir(ir: str, private: bool = False):
    """LLVM IR text optimised as numba optimises (O3, loop and SLP vectorisers) and compiled:
    (object code, the names it declares, the optimised module). ``private``: in an LLVM context and
    target machine of its own, so that another thread may compile beside it."""
    llvm = kernel_cache._binding()
    if private:
        machine = _new_target_machine()
        module = llvm.parse_assembly(ir, context=llvm.create_context())
    else:
        machine = _target_machine()
        module = llvm.parse_assembly(ir)
    module.triple = llvm.get_process_triple()
    module.data_layout = str(machine.target_data)
    module.verify()
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    builder = llvm.create_pass_builder(machine, tuning)
    builder.getModulePassManager().run(module, builder)
    declared = [f.name for f in module.functions if f.is_declaration]
    return machine.emit_object(module), declared, module


def load_ir_kernel(ir: str, symbol: str, n_pointers: int, n_strides: int = 0, generator: str = "",
                   private: bool = False) -> Kernel:
    """The kernel ``symbol`` of LLVM module ``ir``: from memory, from object code on disk, or compiled
    now by LLVM (its object code then saved for the next process). ``generator`` is as for
    `load_kernel`; ``private`` compiles in an LLVM context of its own (from a thread beside others).

    >>> import numpy as np
    >>> ir = '''
    ... define void @twice(i64 %r0, i64 %r1, i64 %inner, i64 %total, i64 %rows, ptr %p) {
    ... entry:
    ...   br label %loop
    ... loop:
    ...   %i = phi i64 [%r0, %entry], [%next, %loop]
    ...   %at = getelementptr double, ptr %p, i64 %i
    ...   %x = sitofp i64 %i to double
    ...   %y = fmul double %x, 2.0
    ...   store double %y, ptr %at
    ...   %next = add i64 %i, 1
    ...   %more = icmp slt i64 %next, %r1
    ...   br i1 %more, label %loop, label %done
    ... done:
    ...   ret void
    ... }'''
    >>> x = np.zeros(3)
    >>> load_ir_kernel(ir, "twice", 1).call(0, 3, 3, 3, 1, x.ctypes.data)
    >>> x.tolist()
    [0.0, 2.0, 4.0]
    """
    key = kernel_cache.cache_key(f"{ir}\n# llvm {' '.join(LLVM_OPTIONS)}\n# generator {generator}")
    kernel = _loaded.get(key)
    if kernel is None:
        prepare_process()
        directory = kernel_directory()
        try:
            call = kernel_cache.load(directory, key, n_pointers, n_strides)
        except Exception:  # an unusable cache entry (another platform, a broken file): recompile
            call = None
        assembly = None
        if call is None:
            code, declared, module = _compile_ir(ir.replace(f"@{symbol}(", f"@{key}(", 1), private)
            try:
                kernel_cache.save_object(directory, key, code, key, declared)
            except OSError:
                pass
            call = kernel_cache.link(code, key, [n for n in declared if not n.startswith("llvm.")],
                                     n_pointers, n_strides)
            if call is None:
                raise RuntimeError(f"a generated kernel refers to a function this process does not have "
                                   f"(one of {declared}); please report it")
            assembly = lambda: _target_machine().emit_assembly(module)  # noqa: E731
        kernel = _loaded[key] = Kernel(key, call, assembly)
    return kernel
