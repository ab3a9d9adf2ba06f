"""Compiled kernels on disk as machine code that a new process loads without starting numba.

Numba's own cache needs numba's compiler target, whose start-up (about half a second) dominated the
first call of a process. A kernel here is a C-callable function (a numba ``cfunc`` on raw pointers),
so its object code can be saved next to its generated source and linked back into the process by
LLVM's JIT linker alone (llvmlite, a few milliseconds). The few numba runtime helpers the object
refers to for its error paths are provided by `_STUBS`; a kernel that refers to any other symbol the
process cannot resolve is not loaded this way (the caller compiles it with numba instead).

The cache key includes the numba, llvmlite, minflux and Python versions, the host CPU and a hash of
this loader's own source files; the caller adds to the key what else shapes its kernels (the
elementwise compiler, its generator and the math inlined into each kernel: see
`kernel_loader.load_kernel`), so object code is never loaded into a process, machine or minflux it
was not made for. Each entry records a SHA-256 of its object code, checked
before linking: a damaged or truncated file is recompiled (with one warning), never linked. Files
are read only from a trusted directory (`minflux.runtime.cache_directory`) and only when they are
private to the user.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import sys
import threading
from pathlib import Path

from .._version import __version__
from ..files import write_atomically
from .cache_directory import untrusted_reason, warn_once

_STUBS = r"""
declare i32 @PyGILState_Ensure()
declare void @PyGILState_Release(i32)

define void @numba_gil_ensure(i32* %state) {
  %s = call i32 @PyGILState_Ensure()
  store i32 %s, i32* %state
  ret void
}

define void @numba_gil_release(i32* %state) {
  %s = load i32, i32* %state
  call void @PyGILState_Release(i32 %s)
  ret void
}

define void @NRT_MemInfo_call_dtor(i8* %meminfo) {
  ret void
}
"""
_STUB_NAMES = {"numba_gil_ensure", "numba_gil_release", "NRT_MemInfo_call_dtor"}

_lock = threading.Lock()
_engine = None
_llvm = None


# the modules of this loader, which decide how every kernel is compiled, saved and linked
_CODE_SHAPING = ("kernel_cache.py", "kernel_loader.py")
_SOURCE_DIR = Path(__file__).parent
_versions_text: str | None = None


def _numba_version() -> str:
    """numba's version record (its ``_version.py``, which every release rewrites), read without
    importing numba or ``importlib.metadata`` (each costs more than loading a cached kernel)."""
    spec = importlib.util.find_spec("numba")
    if spec is None or spec.origin is None:
        raise ImportError("numba is not installed; install it with `pip install numba`")
    record = Path(spec.origin).with_name("_version.py")
    return hashlib.sha256(record.read_bytes()).hexdigest() if record.exists() else spec.origin


def _versions() -> str:
    global _versions_text
    if _versions_text is None:
        import llvmlite

        sources = hashlib.sha256()
        for name in _CODE_SHAPING:
            sources.update((_SOURCE_DIR / name).read_bytes())
        _versions_text = (f"minflux {__version__} numba {_numba_version()} llvmlite {llvmlite.__version__} "
                          f"python {sys.version_info[:2]} loader {sources.hexdigest()}")
    return _versions_text


def _binding():
    global _llvm
    if _llvm is None:
        import llvmlite.binding as llvm
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        _llvm = llvm
    return _llvm


def host_tag() -> str:
    """The host CPU and its features, as LLVM names them."""
    llvm = _binding()
    return f"{llvm.get_host_cpu_name()} {llvm.get_host_cpu_features().flatten()}"


def cache_key(source: str) -> str:
    """The file stem of a kernel: a hash of its source, the versions and the host."""
    text = f"{_versions()}\n{host_tag()}\n{source}"
    return "minflux_kernel_" + hashlib.sha256(text.encode()).hexdigest()[:24]


def prototype(n_pointers: int, n_strides: int = 0):
    """The ctypes type of a kernel: five int64 (r0, r1, inner, total, rows), ``n_strides`` int64 row
    strides and the array pointers.

    ctypes releases the GIL while the kernel runs, so threads run kernels in parallel.
    """
    return ctypes.CFUNCTYPE(None, *([ctypes.c_int64] * (5 + n_strides) + [ctypes.c_void_p] * n_pointers))


def _get_engine():
    global _engine
    if _engine is None:
        llvm = _binding()
        target = llvm.Target.from_default_triple()
        machine = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                               features=llvm.get_host_cpu_features().flatten(),
                                               codemodel="jitdefault")
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        stubs = llvm.parse_assembly(_STUBS)
        stubs.triple = llvm.get_process_triple()
        engine.add_module(stubs)
        engine.finalize_object()
        for name in _STUB_NAMES:
            llvm.add_symbol(name, engine.get_function_address(name))
        _engine = engine
    return _engine


def _resolvable(name: str) -> bool:
    """True when the JIT linker can find ``name``: a stub, or a symbol of this process (libpython,
    libm, ...) which is then registered with LLVM by its address."""
    llvm = _binding()
    if name in _STUB_NAMES or llvm.address_of_symbol(name):
        return True
    try:
        address = ctypes.cast(getattr(_process(), name), ctypes.c_void_p).value
    except AttributeError:
        return False
    if not address:
        return False
    llvm.add_symbol(name, address)
    return True


_process_handle = None


def _process():
    global _process_handle
    if _process_handle is None:
        _process_handle = ctypes.PyDLL(None)   # the running process's own symbol table
    return _process_handle


def load(directory: Path, key: str, n_pointers: int, n_strides: int = 0):
    """The kernel saved under ``key`` as a ctypes function, or None when it is absent or unusable."""
    meta_path, object_path = directory / f"{key}.json", directory / f"{key}.o"
    try:
        untrusted = untrusted_reason(meta_path) or untrusted_reason(object_path)
        if untrusted is not None:
            warn_once(f"not linking cached kernels that others can change: {untrusted}; compiling instead")
            return None
        meta = json.loads(meta_path.read_text())
        code = object_path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("key") != key or key not in str(meta.get("symbol")):
        return None
    if meta.get("sha256") != hashlib.sha256(code).hexdigest():
        warn_once(f"the cached kernel {object_path} is damaged (its SHA-256 does not match); recompiling")
        return None
    return link(code, meta["symbol"], meta.get("externals", ()), n_pointers, n_strides)


def save(directory: Path, key: str, cfunc) -> None:
    """Save a compiled numba ``cfunc``'s object code and what it needs to be linked again."""
    library = cfunc._library
    try:
        _, kind, data = library.serialize_using_object_code()
    except (ValueError, RuntimeError):
        return
    module = library._final_module
    declared = {f.name for f in module.functions if f.is_declaration} | \
        {g.name for g in module.global_variables if g.is_declaration}
    save_object(directory, key, data[0], cfunc.native_name, sorted(declared))


def save_object(directory: Path, key: str, code: bytes, symbol: str, declared) -> None:
    """Save object ``code`` defining ``symbol``, which refers to the functions ``declared``."""
    externals = sorted(n for n in declared if not n.startswith("llvm."))  # intrinsics are not symbols
    write_atomically(directory / f"{key}.o", code, mode=0o600)
    meta = {"key": key, "symbol": symbol, "externals": externals, "sha256": hashlib.sha256(code).hexdigest()}
    write_atomically(directory / f"{key}.json", json.dumps(meta).encode(), mode=0o600)  # last: marks completion


def link(code: bytes, symbol: str, externals, n_pointers: int, n_strides: int = 0):
    """Object ``code`` linked into this process: ``symbol`` as a ctypes function, or None when a
    symbol it refers to cannot be resolved."""
    if not all(_resolvable(s) for s in externals):
        return None
    llvm = _binding()
    with _lock:
        engine = _get_engine()
        engine.add_object_file(llvm.ObjectFileRef.from_data(code))
        engine.finalize_object()
        address = engine.get_function_address(symbol)
    if not address:
        return None
    return prototype(n_pointers, n_strides)(address)
