"""The CPU backend: IR -> Python source of a scalar kernel -> numba machine code, cached on disk.

Each transformed function becomes a generated module with

* ``_body(...)``: the scalar function on one element (inlined into the loop). A loop-free
  function is first if-converted (`minflux.compiler.ifconvert`), so the element loop is
  straight-line code with selects that LLVM vectorises; a function with ``while``/``for`` loops
  keeps real branches and loops. In float32 kernels exp, log, tanh, sigmoid, log1p, expm1 and
  softplus are the vectorisable implementations of `minflux.compiler.fastmath`.
* ``kernel(r0, r1, inner, total, rows, row strides..., inputs..., outputs...)``: a C-callable
  function (a numba ``cfunc`` on raw pointers) looping over rows ``r0:r1`` of a ``(rows, inner)``
  view of the broadcast shape. Each input is passed in its smallest form: a full array whose rows
  are contiguous, read in place one row stride apart (a column slice of a wider array needs no
  copy; a transpose is copied), a per-row vector (an ``(n, 1)`` control input is never materialised), a per-column vector,
  or a single value. Outputs are preallocated contiguous arrays; one pass over memory writes every
  output and every partial. Calls through ctypes release the GIL, and large calls split their rows
  over a thread pool.

Kernels are loaded by `minflux.runtime.kernel_loader.load_kernel`, cached in memory and on disk under
`minflux.runtime.cache_directory.kernel_directory()` (below ``MINFLUX_CACHE_DIR`` when set, a private
directory that is checked before anything is linked from it): the file name is a hash of the
generated source -- which spells out the transformed IR, so the scalar function's source,
constants, input kinds and dtypes and the differentiable-input mask --, the input layouts, the
modules that shape the generated code (`generator_version`), the minflux/numba/llvmlite/Python
versions and the host CPU. Next to the source lies the kernel's object code
(`minflux.runtime.kernel_cache`), which a second process links back in milliseconds without
starting numba.
"""
from __future__ import annotations

import functools
import hashlib
import math
import threading
from pathlib import Path

import numpy as np

from ..runtime import settings
from ..runtime.kernel_loader import Kernel, load_kernel
from ..runtime.native_runner import MAX_KERNEL_ARGUMENTS, copy_words, function_address, kernel_words, sequence
from ..runtime.pointers import pointers
from ..runtime.row_pool import run_rows
from ..runtime.split_choice import SplitChoice
from ..runtime.threads import PARALLEL_MIN_ELEMENTS, threads_now
from .dtypes import kind_dtype
from .errors import CompileError
from .ifconvert import prepare
from .ir import Assign, Break, Call, Continue, Function, If, Loop, Return, Var, has_loops
from .layout import READ_BROADCAST_COPY, READ_COPY, Plan, read, row_stride
from .rules import TABLE

# the IR's pseudo-ops; every table primitive is spelled on its row (`minflux.compiler.rules`)
_CONVERSIONS = {"float": "_F({0})", "int": "_I({0})"}

_HEADER = '''"""A minflux elementwise kernel, generated from the scalar function {name}. Do not edit."""
import math
import numpy as np
from numba import carray, cfunc, njit, types
from minflux.compiler.fastmath import (exp_f32, log_f32, tanh_f32, sigmoid_f32, log1p_f32,
                                        expm1_f32, softplus_f32)
from minflux.compiler.numba_runtime import (_max, _min, _log64, _log1p64, _select, _sigmoid64,
                                             _softplus64)

_F = np.{float_type}
_I = np.int64
'''


# -- source generation ---------------------------------------------------------------------------

class _Printer:
    def __init__(self, fn: Function, float_type: str, sub_names: dict, constants: "_Constants",
                 scalar_return: bool = False):
        self.fn = fn
        self.constants = constants
        self.scalar_return = scalar_return   # a subroutine returns its one value, not a tuple
        self.f32 = float_type == "float32"
        self.sub_names = sub_names
        self.lines: list = []

    def atom(self, a) -> str:
        if isinstance(a, (Var, _Printed)):
            return a.name
        v = a.value
        if isinstance(v, bool):
            return repr(v)
        return self.constants.name(v)

    def call(self, c: Call) -> str:
        args = [self.atom(a) for a in c.args]
        op = c.op
        if op in self.sub_names:
            return f"{self.sub_names[op]}({', '.join(args)})"
        prim = TABLE.get(op)
        if prim is None:
            if op in _CONVERSIONS:
                return _CONVERSIONS[op].format(*args)
        else:
            spelling = prim.numba_f32 if self.f32 and prim.numba_f32 else prim.numba
            if spelling is not None:
                return spelling.format(*args)
        raise CompileError(f"the numba backend has no spelling for the primitive {op!r}; give its row "
                           "one (define(..., numba='...') in minflux.compiler.rules), or define the "
                           "function with mf.scalar_rule (whose primal body is compiled)", None, op)

    def value(self, v) -> str:
        return self.call(v) if isinstance(v, Call) else self.atom(v)

    def block(self, stmts: list, indent: str, latch: list | None):
        if not stmts:
            self.lines.append(indent + "pass")
        for s in stmts:
            if isinstance(s, Assign):
                self.lines.append(f"{indent}{s.target} = {self.value(s.value)}")
            elif isinstance(s, If):
                self.lines.append(f"{indent}if {self.atom(s.cond)}:")
                self.block(s.body, indent + "    ", latch)
                if s.orelse:
                    self.lines.append(f"{indent}else:")
                    self.block(s.orelse, indent + "    ", latch)
            elif isinstance(s, Loop):
                self.lines.append(f"{indent}while True:")
                self.block(s.body + s.latch, indent + "    ", s.latch)
            elif isinstance(s, Break):
                self.lines.append(f"{indent}break")
            elif isinstance(s, Continue):
                if latch:
                    self.block(latch, indent, latch)
                self.lines.append(f"{indent}continue")
            elif isinstance(s, Return):
                values = ", ".join(self.atom(v) for v in s.values)
                self.lines.append(f"{indent}return {values}" if self.scalar_return
                                  else f"{indent}return ({values},)")
            else:  # pragma: no cover
                raise TypeError(f"not an IR statement: {s!r}")

    def function(self, name: str) -> list:
        fn = self.fn
        out = ["@njit(error_model='numpy')",
               f"def {name}({', '.join(fn.params)}):"]
        out += self.zero_initialise("    ")
        self.block(fn.body, "    ", None)
        return out + self.lines

    def zero_initialise(self, indent: str) -> list:
        """Every non-parameter variable starts as its kind's zero (if-converted code reads them)."""
        zero = {"f": self.constants.name(0.0), "i": self.constants.name(0), "b": "False"}
        params = set(self.fn.params)
        return [f"{indent}{var} = {zero[kind]}" for var, kind in sorted(self.fn.kinds.items())
                if var not in params]

    def inline(self, indent: str, args: list, results: list) -> list:
        """A straight-line body as statements of the kernel's element loop: parameters bound to
        ``args``, the returned values assigned to ``results``.

        Printed in single-assignment form (a reassigned variable gets a new name each time, a
        variable read before any assignment is its kind's zero), so numba's SSA reconstruction,
        slow on many reassignments of one name, has nothing to do.
        """
        fn = self.fn
        zero = {"f": self.constants.name(0.0), "i": self.constants.name(0), "b": "False"}
        current = {p: p for p in fn.params}
        out = [f"{indent}{p} = {a}" for p, a in zip(fn.params, args)]
        count: dict = {}

        def read(atom) -> str:
            if isinstance(atom, Var):
                name = current.get(atom.name)
                if name is None:
                    name = current[atom.name] = zero[fn.kinds[atom.name]]
                return name
            return self.atom(atom)

        *body, ret = fn.body
        for stmt in body:
            value = stmt.value
            if isinstance(value, Call):
                text = self.call(Call(value.op, tuple(_Printed(read(a)) for a in value.args)))
            else:
                text = read(value)
            n = count[stmt.target] = count.get(stmt.target, -1) + 1
            name = stmt.target if n == 0 else f"{stmt.target}__{n}"
            current[stmt.target] = name
            out.append(f"{indent}{name} = {text}")
        out += [f"{indent}{r} = {read(v)}" for r, v in zip(results, ret.values)]
        return out


class _Constants:
    """The numbers of one kernel module, each a module-level constant of the kernel's types
    (``_c0 = _F(0.5)``) that numba freezes into the machine code. A constant costs numba's typing and
    lowering nothing; each ``_F(0.5)`` written in the loop was a call to resolve and lower."""

    def __init__(self):
        self.values: dict = {}

    def name(self, value) -> str:
        key = (type(value), repr(value))     # 0.0 and -0.0 are two constants, every nan one
        entry = self.values.get(key)
        if entry is None:
            entry = self.values[key] = (f"_c{len(self.values)}", value)
        return entry[0]

    def definitions(self) -> list:
        return [f"{name} = {_literal(value)}" for name, value in self.values.values()]


def _literal(v) -> str:
    if isinstance(v, int):
        return f"_I({v})"
    if math.isnan(v):
        return "_F(np.nan)"
    if math.isinf(v):
        return "_F(np.inf)" if v > 0 else "_F(-np.inf)"
    return f"_F({v!r})"


class _Printed:
    """An operand already printed (a name or a literal): `_Printer.atom` returns it as it is."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


def _straight_line(fn: Function) -> bool:
    """True when ``fn`` is assignments and one final return (it can be printed into the loop)."""
    *body, last = fn.body
    return isinstance(last, Return) and all(isinstance(s, Assign) for s in body)


def generate_source(fn: Function, float_type: str, patterns: tuple) -> str:
    """The Python source of the kernel module for transformed ``fn`` and input ``patterns``.

    ``patterns[k]`` is ``"F"`` (full), ``"R"`` (one value per row), ``"C"`` (one per column) or
    ``"S"`` (one value).
    """
    constants = _Constants()
    lines = []
    sub_names = {op: f"_sub{i}" for i, op in enumerate(sorted(fn.subroutines))}
    for op, name in sub_names.items():
        lines += _Printer(prepare(fn.subroutines[op]), float_type, sub_names, constants, True).function(name)
        lines.append("")
    prepared = prepare(fn)
    inline = _straight_line(prepared)
    if not inline:
        lines += _Printer(prepared, float_type, sub_names, constants).function("_body")
        lines.append("")
    n_in, n_out = len(fn.params), fn.n_outputs
    numba_type = {"f": float_type, "i": "int64", "b": "boolean"}
    pointers = [f"types.CPointer(types.{numba_type[fn.kinds[p]]})" for p in fn.params] + \
        [f"types.CPointer(types.{numba_type[k]})" for k in fn.output_kinds]
    strided = [k for k, p in enumerate(patterns) if p == "F"]   # each full input has a row stride
    lines.append(f"_SIG = types.void({', '.join(['types.int64'] * (5 + len(strided)) + pointers)})")
    lines.append("")
    lines.append("@cfunc(_SIG, error_model='numpy', boundscheck=False)")
    params = [f"_p{k}" for k in range(n_in)] + [f"_q{m}" for m in range(n_out)]
    ints = ["_r0", "_r1", "_inner", "_total", "_rows"] + [f"_s{k}" for k in strided]
    lines.append(f"def kernel({', '.join(ints + params)}):")
    for k, p in enumerate(patterns):
        length = {"F": f"_rows * _s{k} + _inner", "R": "_rows", "C": "_inner", "S": "1"}[p]
        lines.append(f"    _in{k} = carray(_p{k}, ({length},))")
    for m in range(n_out):
        lines.append(f"    _out{m} = carray(_q{m}, (_total,))")
    for k, p in enumerate(patterns):
        if p == "S":
            lines.append(f"    _a{k} = _in{k}[0]")
    lines.append("    for _r in range(_r0, _r1):")
    lines.append("        _lo = _r * _inner")
    lines.append("        _hi = min(_lo + _inner, _total)")
    for k, p in enumerate(patterns):
        if p == "F":
            lines.append(f"        _a{k} = _in{k}[_r * _s{k}:_r * _s{k} + _hi - _lo]")
        elif p == "R":
            lines.append(f"        _a{k} = _in{k}[_r]")
    for m in range(n_out):
        lines.append(f"        _b{m} = _out{m}[_lo:_hi]")
    lines.append("        for _j in range(_hi - _lo):")
    args = []
    for k, p in enumerate(patterns):
        args.append(f"_a{k}[_j]" if p == "F" else f"_in{k}[_j]" if p == "C" else f"_a{k}")
    results = [f"_y{m}" for m in range(n_out)]
    if inline:   # numba's own inlining deep-copies its IR per call site: seconds for a large body
        lines += _Printer(prepared, float_type, sub_names, constants).inline("            ", args, results)
    else:
        lines.append(f"            {', '.join(results)}, = _body({', '.join(args)})")
    for m in range(n_out):
        lines.append(f"            _b{m}[_j] = _y{m}")
    header = [_HEADER.format(name=fn.name, float_type=float_type), *constants.definitions(), ""]
    return "\n".join(header + lines) + "\n"


# -- compiling and caching ------------------------------------------------------------------------

_lock = threading.Lock()

# the modules whose text ends up in, or decides, the machine code of every kernel generated here
_CODE_SHAPING = ("numba_backend.py", "fastmath.py", "numba_runtime.py", "ifconvert.py")
_SOURCE_DIR = Path(__file__).parent
_generator_text: str | None = None


def generator_version() -> str:
    """A hash of the modules that shape the kernels generated here (this generator, the vectorisable
    math and the runtime helpers each kernel inlines), part of every kernel's cache key.

    >>> len(generator_version())
    64
    """
    global _generator_text
    if _generator_text is None:
        sources = hashlib.sha256()
        for name in _CODE_SHAPING:
            sources.update((_SOURCE_DIR / name).read_bytes())
        _generator_text = sources.hexdigest()
    return _generator_text


COPIES = (READ_COPY, READ_BROADCAST_COPY)   # how an input read through a new array is read

# a kernel with while/for loops may run long: it runs in this many row chunks, and Ctrl-C (a
# KeyboardInterrupt) takes effect between two chunks
LOOP_CHUNKS = 64


def build_kernel(dual, float_dtype, patterns: tuple) -> Kernel:
    """The kernel of transformed function ``dual`` for one float type and input layout."""
    source = generate_source(dual.function, np.dtype(float_dtype).name, patterns)
    with _lock:
        kernel = load_kernel(source, len(dual.function.params) + dual.function.n_outputs,
                             patterns.count("F"), generator_version())
    kernel.has_loops = has_loops(dual.function.body)
    return kernel


class Launcher:
    """``kernel`` bound to one layout `Plan`: ``launcher(arrays)`` runs it on arrays of the plan's
    signature and returns one array of ``shape`` per output (every decision made once): new, or
    ``out[k]`` where ``out`` gives one (C-contiguous, of the output's dtype)."""

    __slots__ = ("kernel", "plan", "shape", "out_dtypes", "head", "reads", "chunks", "splitting")

    def __init__(self, kernel: Kernel, plan: Plan, out_dtypes: list, shape: tuple):
        self.kernel, self.plan, self.shape, self.out_dtypes = kernel, plan, shape, out_dtypes
        self.head = (plan.inner, plan.total, plan.rows, *plan.strides)
        self.reads = [(k, how) for k, how in enumerate(plan.reads) if how]   # the inputs not read in place
        chunks = min(plan.rows, LOOP_CHUNKS) if kernel.has_loops else 1
        self.chunks = [(plan.rows * c // chunks, plan.rows * (c + 1) // chunks) for c in range(chunks)]
        self.splitting = SplitChoice()   # whether a large launch gains from splitting its rows, measured

    def __call__(self, arrays: list, out: list | None = None) -> list:
        shape = self.shape
        if out is None:
            results = [np.empty(shape, dtype) for dtype in self.out_dtypes]
        else:
            results = [np.empty(shape, dtype) if o is None else o for o, dtype in zip(out, self.out_dtypes)]
        total = self.plan.total
        if total:
            arrays = self._read(arrays)   # held here: a copy must outlive the kernel's call
            args = (*self.head, *pointers([*arrays, *results]))
            if total < PARALLEL_MIN_ELEMENTS:   # on this thread, without asking the pool
                for r0, r1 in self.chunks:
                    self.kernel.call(r0, r1, *args)
            else:
                self.splitting.run(min(threads_now(), self.plan.rows), lambda n_threads: [
                    run_rows(self.kernel.call, r0, r1, n_threads, args) for r0, r1 in self.chunks])
        return results

    def _read(self, arrays: list) -> list:
        """The arrays the kernel reads: inputs broadcast or copied as the plan says."""
        if self.reads:
            arrays = list(arrays)
            for k, how in self.reads:
                arrays[k] = read(arrays[k], how, self.shape)
        return arrays

    def command(self, arrays: list, out: list):
        """The native runner's `Command` (`minflux.runtime.native_runner.kernel_words`) for what
        ``self(arrays, out)`` does, or None where that is more than one call of the kernel on this
        thread into ``out`` (an input broadcast through a copy, rows in chunks, an output left new, no
        elements). An input the kernel reads through a copy is copied by the command (rows of bytes)
        into the copy the probe made; a numpy scalar input is read from a cell of its own, which the
        command's ``refresh`` writes from each call's scalar of the same type (as functions of
        ``arrays``). A launch large enough to split over threads, unless its calls measured faster on one
        (`SplitChoice`), is a command whose rows may run in shares at once (``rows``), as the launch
        splits them, where it reads no copy."""
        total = self.plan.total
        if (not total or len(self.chunks) != 1 or any(o is None for o in out)
                or 2 + len(self.head) + len(arrays) + len(out) > MAX_KERNEL_ARGUMENTS
                or total >= PARALLEL_MIN_ELEMENTS and self.reads):
            return None
        read, cells, gathers = self._read(arrays), [], []
        for k, how in self.reads:
            if how == READ_COPY and arrays[k].__class__ is np.ndarray:   # its rows copied into the probe's copy
                gathers.append(_gather(arrays[k], read[k]))
                if gathers[-1] is None:
                    return None
            elif how in COPIES:
                if how != READ_COPY:   # a broadcast copy
                    return None
                cells.append((k, arrays[k].__class__, read[k]))
        command = kernel_words(function_address(self.kernel.call), [0, self.plan.rows, *self.head],
                               pointers([*read, *out]))
        if total >= PARALLEL_MIN_ELEMENTS and self.splitting.splits is not False:
            return command._replace(rows=self.plan.rows)
        if gathers:
            command = sequence(*gathers, command)
        copies = tuple(read[k] for k, how in self.reads if how in COPIES)
        if not copies:
            return command
        return command._replace(held=copies, refresh=None if not cells else (
            functools.partial(_refresh, cells), lambda a: [a[k] for k, _, _ in cells]))


def _gather(a: np.ndarray, into: np.ndarray):
    """The copy command (`minflux.runtime.native_runner.copy_words`) of ``a``'s elements into
    C-contiguous ``into``: rows of contiguous bytes a uniform stride apart, or None where ``a`` is not
    so laid out."""
    inner = 1   # the elements of its innermost contiguous run
    for n, stride in reversed([(n, stride) for n, stride in zip(a.shape, a.strides) if n != 1]):
        if stride != inner * a.itemsize:
            break
        inner *= n
    step = row_stride(a, inner)
    if step is None or step < inner:   # not rows, or rows that overlap
        return None
    row = inner * a.itemsize
    return copy_words(a.size // inner, row, (a.ctypes.data, step * a.itemsize), (into.ctypes.data, row))


def _refresh(cells: list, arrays: list) -> bool:
    """Write each numpy scalar of ``arrays`` that a command reads into its cell (`Launcher.command`);
    False, writing nothing, where one is not of the type its cell was made for."""
    for k, kind, _ in cells:
        if arrays[k].__class__ is not kind:
            return False
    for k, _, cell in cells:
        cell[...] = arrays[k]
    return True


def launcher(kernel: Kernel, dual, plan: Plan, float_dtype, shape: tuple) -> Launcher:
    """A `Launcher` of ``kernel`` (built for ``dual``) for arrays laid out as ``plan``."""
    return Launcher(kernel, plan, [kind_dtype(k, float_dtype) for k in dual.function.output_kinds], shape)
