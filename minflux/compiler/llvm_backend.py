"""The CPU backend that writes LLVM IR: IR -> an LLVM module of one kernel -> machine code, cached on disk.

The kernel has the signature and the loop of `minflux.compiler.numba_backend`'s (rows ``r0:r1`` of
a ``(rows, inner)`` view, each input in its smallest form, one pass writing every output and every
partial), but minflux writes its LLVM IR itself and LLVM compiles it (through llvmlite, numba's
binding), which skips numba's typing and lowering: about 25 ms a kernel instead of 150-500 ms.

The scalar function becomes an internal ``alwaysinline`` function returning a struct of its
outputs. Each variable lives in a stack slot that LLVM promotes to registers, so ``if``, ``while``,
``break``, ``continue`` and early ``return`` are plain branches; a loop-free function is
if-converted first (``MINFLUX_NUMBA_BRANCHES`` decides, as for numba), so the element loop is
straight-line code that LLVM vectorises. Each primitive is spelled by its row (``llvm``,
``llvm_int`` in `minflux.compiler.rules`) with the helpers of `minflux.compiler.llvm_math`; a row
without an LLVM spelling (a user's primitive that spells only ``numba=``) makes `generate_ir` raise
`Unspelled`, and the kernel is compiled by numba instead.

>>> from minflux.compiler.ir import Function, Assign, Call, Var, Return
>>> fn = Function("double_it", ["x"], [Assign("y", Call("add", (Var("x"), Var("x")))),
...                                    Return((Var("y"),))], kinds={"x": "f", "y": "f"}, output_kinds=["f"])
>>> "fadd double" in generate_ir(fn, "float64", ("F",))
True
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..runtime.kernel_loader import Kernel, load_ir_kernel
from .ir import (COMPARISONS, LOGICAL, Assign, Break, Call, Const, Continue, Function, If, Loop, Return,
                 assigned_names, has_loops, result_kind)
from .kinds import infer_kinds
from .llvm_math import definitions, float_literal
from .ifconvert import prepare
from .rules import TABLE

__all__ = ["SYMBOL", "Unspelled", "build_kernel", "generate_ir", "generator_version"]

SYMBOL = "minflux_kernel"
_FLOAT = {"float32": ("float", "f32", "f"), "float64": ("double", "f64", "")}


class Unspelled(Exception):
    """The function uses a primitive (or a kind of one) that has no LLVM spelling."""


class _Body:
    """The LLVM function of one typed scalar function (or subroutine), returning a struct of its
    outputs (a subroutine: its one value)."""

    def __init__(self, fn: Function, float_type: str, subroutines: dict, single: bool = False):
        self.fn, self.subroutines, self.single = fn, subroutines, single
        self.float_type = float_type
        self.ftype, self.ftag, self.suffix = _FLOAT[float_type]
        variables = dict.fromkeys([*fn.params, *assigned_names(fn.body)])
        self.slots = {name: f"%v{i}" for i, name in enumerate(variables)}
        self.lines: list = []
        self.count = 0
        self.blocks = 0
        self.open = True            # the current block has no terminator yet
        self.loops: list = []

    # -- values -------------------------------------------------------------------------------------
    def type(self, kind: str) -> str:
        return {"f": self.ftype, "i": "i64", "b": "i1"}[kind]

    def kind(self, atom) -> str:
        return atom.kind if isinstance(atom, Const) else self.fn.kinds[atom.name]

    def emit(self, text: str) -> None:
        if not self.open:
            self.label(self.new_label("dead"))
        self.lines.append("  " + text)

    def temp(self, text: str) -> str:
        self.count += 1
        name = f"%t{self.count}"
        self.emit(f"{name} = {text}")
        return name

    def new_label(self, stem: str) -> str:
        self.blocks += 1
        return f"{stem}{self.blocks}"

    def label(self, name: str) -> None:
        if self.open:
            self.lines.append(f"  br label %{name}")
        self.lines.append(f"{name}:")
        self.open = True

    def jump(self, text: str) -> None:
        self.emit(text)
        self.open = False

    def constant(self, value, kind: str) -> str:
        if kind == "b":
            return "true" if value else "false"
        if kind == "i":
            if not -2**63 <= int(value) < 2**63:
                raise Unspelled(f"the integer constant {value} does not fit in 64 bits")
            return str(int(value))
        return float_literal(float(value), self.float_type)

    def read(self, atom) -> str:
        if isinstance(atom, Const):
            return self.constant(atom.value, atom.kind)
        kind = self.fn.kinds[atom.name]
        return self.temp(f"load {self.type(kind)}, ptr {self.slots[atom.name]}")

    def convert(self, value: str, have: str, want: str) -> str:
        if have == want:
            return value
        t = self.type(want)
        source = self.type(have)
        if want == "b":
            zero = "0.0" if have == "f" else "0"
            return self.temp(f"{'fcmp une' if have == 'f' else 'icmp ne'} {source} {value}, {zero}")
        if want == "f":
            return self.temp(f"{'uitofp' if have == 'b' else 'sitofp'} {source} {value} to {t}")
        return self.temp(f"{'zext' if have == 'b' else 'fptosi'} {source} {value} to {t}")

    def call(self, call: Call) -> tuple:
        """The value of ``call`` and its kind."""
        op, args = call.op, call.args
        kinds = [self.kind(a) for a in args]
        values = [self.read(a) for a in args]
        if op in ("float", "int"):
            want = "f" if op == "float" else "i"
            return self.convert(values[0], kinds[0], want), want
        if op in self.subroutines:
            name, out_kind, param_kinds = self.subroutines[op]
            typed = ", ".join(f"{self.type(want)} {self.convert(v, have, want)}"
                              for v, have, want in zip(values, kinds, param_kinds))
            return self.temp(f"call {self.type(out_kind)} @{name}({typed})"), out_kind
        prim = TABLE.get(op)
        if prim is None:
            raise Unspelled(f"the primitive {op!r}")
        if op in COMPARISONS:
            values, kind = self.comparison_operands(args, kinds, values)
            result = "b"
        elif op in LOGICAL:
            kind = result = "b"
        else:
            kind = result = result_kind(op, kinds)
            if op == "where":
                kind = kinds[1]
            elif kind == "b":
                raise Unspelled(f"the primitive {op!r} on bools")
        spelling = prim.llvm_int if kind == "i" else prim.llvm
        if spelling is None:
            raise Unspelled(f"the primitive {op!r} on {'integers' if kind == 'i' else 'floats'}")
        t = "double" if kind == "d" else self.type(kind)    # "d": a comparison in double precision
        tag = {"f": self.ftag, "d": "f64", "i": "i64", "b": "i1"}[kind]
        return self.temp(spelling.format(*values, t=t, tag=tag, s=self.suffix)), result

    def comparison_operands(self, args, kinds, values) -> tuple:
        """Operands of a comparison in one kind: numpy compares a float with an integer in double
        precision (kind ``"d"``), and with an integer constant the float type holds exactly in that
        type."""
        if kinds[0] == kinds[1] != "b":
            return values, kinds[0]
        if "f" not in kinds:
            return [self.convert(v, k, "i") for v, k in zip(values, kinds)], "i"
        exact = 2**24 if self.float_type == "float32" else 2**53
        for i in (0, 1):
            if isinstance(args[i], Const) and kinds[1 - i] == "f" and abs(int(args[i].value)) <= exact:
                values = list(values)
                values[i] = float_literal(float(args[i].value), self.float_type)
                return values, "f"
        widened = []
        for v, k in zip(values, kinds):
            if k == "f":
                widened.append(v if self.ftype == "double" else self.temp(f"fpext float {v} to double"))
            else:
                widened.append(self.temp(f"{'uitofp' if k == 'b' else 'sitofp'} {self.type(k)} {v} to double"))
        return widened, "d"

    # -- statements ---------------------------------------------------------------------------------
    def block(self, stmts: list) -> None:
        for s in stmts:
            if isinstance(s, Assign):
                self.assign(s)
            elif isinstance(s, If):
                cond = self.read(s.cond)
                then, orelse, end = self.new_label("then"), self.new_label("else"), self.new_label("endif")
                self.jump(f"br i1 {cond}, label %{then}, label %{orelse}")
                self.label(then)
                self.block(s.body)
                if self.open:
                    self.jump(f"br label %{end}")
                self.label(orelse)
                self.block(s.orelse)
                self.label(end)
            elif isinstance(s, Loop):
                head, latch, end = self.new_label("loop"), self.new_label("latch"), self.new_label("endloop")
                self.label(head)
                self.loops.append((latch, end))
                self.block(s.body)
                self.label(latch)
                self.block(s.latch)
                self.loops.pop()
                self.jump(f"br label %{head}")
                self.label(end)
            elif isinstance(s, Break):
                self.jump(f"br label %{self.loops[-1][1]}")
            elif isinstance(s, Continue):
                self.jump(f"br label %{self.loops[-1][0]}")
            elif isinstance(s, Return):
                self.ret([self.read(v) for v in s.values])
            else:  # pragma: no cover
                raise TypeError(f"not an IR statement: {s!r}")

    def assign(self, s: Assign) -> None:
        want = self.fn.kinds[s.target]
        if isinstance(s.value, Call):
            value, kind = self.call(s.value)
        else:
            value, kind = self.read(s.value), self.kind(s.value)
        value = self.convert(value, kind, want)
        self.emit(f"store {self.type(want)} {value}, ptr {self.slots[s.target]}")

    def return_type(self) -> str:
        types = [self.type(k) for k in self.fn.output_kinds]
        return types[0] if self.single else "{" + ", ".join(types) + "}"

    def ret(self, values: list) -> None:
        rtype = self.return_type()
        if self.single:
            self.jump(f"ret {rtype} {values[0]}")
            return
        struct = "undef"
        for k, (v, kind) in enumerate(zip(values, self.fn.output_kinds)):
            struct = self.temp(f"insertvalue {rtype} {struct}, {self.type(kind)} {v}, {k}")
        self.jump(f"ret {rtype} {struct}")

    def function(self, name: str) -> str:
        fn = self.fn
        params = ", ".join(f"{self.type(fn.kinds[p])} %a{i}" for i, p in enumerate(fn.params))
        head = [f"define internal {self.return_type()} @{name}({params}) alwaysinline {{", "entry:"]
        for var, slot in self.slots.items():
            kind = fn.kinds[var]
            self.lines.append(f"  {slot} = alloca {self.type(kind)}")
        for i, p in enumerate(fn.params):
            self.lines.append(f"  store {self.type(fn.kinds[p])} %a{i}, ptr {self.slots[p]}")
        params_set = set(fn.params)
        for var, slot in self.slots.items():
            if var not in params_set:
                kind = fn.kinds[var]
                self.lines.append(f"  store {self.type(kind)} {self.constant(0, kind)}, ptr {slot}")
        self.block(fn.body)
        if self.open:
            self.jump(f"ret {self.return_type()} zeroinitializer")
        return "\n".join(head + self.lines + ["}"])


def _subroutines(fn: Function, float_type: str) -> tuple:
    """The LLVM functions of the scalar rules ``fn`` calls (and those they call), and the table
    every body calls them by: ``{op: (LLVM name, output kind, parameter kinds)}``."""
    typed: dict = {}
    pending = dict(fn.subroutines)
    while pending:
        op, sub = pending.popitem()
        if op in typed:
            continue
        sub = sub if sub.kinds else infer_kinds(sub, ["f"] * len(sub.params))
        if len(sub.output_kinds) != 1:
            raise Unspelled(f"the scalar rule {op!r} returns {len(sub.output_kinds)} values")
        typed[op] = sub
        pending.update({k: v for k, v in sub.subroutines.items() if k not in typed})
    names = {op: (f"minflux_rule{i}", sub.output_kinds[0], [sub.kinds[p] for p in sub.params])
             for i, (op, sub) in enumerate(sorted(typed.items()))}
    return [_Body(prepare(sub), float_type, names, single=True).function(names[op][0])
            for op, sub in typed.items()], names


def _memory_type(kind: str, float_type: str) -> str:
    return {"f": _FLOAT[float_type][0], "i": "i64", "b": "i8"}[kind]


def generate_ir(fn: Function, float_type: str, patterns: tuple) -> str:
    """The LLVM module of the kernel of transformed ``fn`` for input ``patterns`` (each ``"F"``
    full, ``"R"`` one value per row, ``"C"`` one per column or ``"S"`` one value); its function is
    `SYMBOL`, with `numba_backend`'s signature."""
    subroutines, names = _subroutines(fn, float_type)
    body = _Body(prepare(fn), float_type, names)
    functions = [*subroutines, body.function("minflux_body")]
    strided = [k for k, p in enumerate(patterns) if p == "F"]
    in_types = [_memory_type(fn.kinds[p], float_type) for p in fn.params]
    out_types = [_memory_type(k, float_type) for k in fn.output_kinds]
    params = ["i64 %r0", "i64 %r1", "i64 %inner", "i64 %total", "i64 %rows",
              *(f"i64 %s{k}" for k in strided), *(f"ptr %p{k}" for k in range(len(patterns))),
              *(f"ptr %q{m}" for m in range(len(out_types)))]
    pre, row, elem = [], [], []

    def load(target: str, kind: str, memory: str, pointer: str, out: list) -> None:
        if kind == "b":
            out += [f"  {target}.byte = load i8, ptr {pointer}", f"  {target} = icmp ne i8 {target}.byte, 0"]
        else:
            out.append(f"  {target} = load {memory}, ptr {pointer}")

    args = []
    for k, (pattern, memory) in enumerate(zip(patterns, in_types)):
        kind = fn.kinds[fn.params[k]]
        if pattern == "S":
            load(f"%x{k}", kind, memory, f"%p{k}", pre)
        elif pattern == "R":
            row.append(f"  %x{k}.at = getelementptr {memory}, ptr %p{k}, i64 %r")
            load(f"%x{k}", kind, memory, f"%x{k}.at", row)
        elif pattern == "F":
            row += [f"  %b{k} = mul i64 %r, %s{k}", f"  %row{k} = getelementptr {memory}, ptr %p{k}, i64 %b{k}"]
            elem.append(f"  %x{k}.at = getelementptr {memory}, ptr %row{k}, i64 %j")
            load(f"%x{k}", kind, memory, f"%x{k}.at", elem)
        else:
            elem.append(f"  %x{k}.at = getelementptr {memory}, ptr %p{k}, i64 %j")
            load(f"%x{k}", kind, memory, f"%x{k}.at", elem)
        args.append(f"{body.type(kind)} %x{k}")
    rtype = body.return_type()
    elem.append(f"  %y = call {rtype} @minflux_body({', '.join(args)})")
    for m, (kind, memory) in enumerate(zip(fn.output_kinds, out_types)):
        row.append(f"  %out{m} = getelementptr {memory}, ptr %q{m}, i64 %lo")
        elem += [f"  %y{m} = extractvalue {rtype} %y, {m}",
                 f"  %y{m}.at = getelementptr {memory}, ptr %out{m}, i64 %j"]
        if kind == "b":
            elem += [f"  %y{m}.byte = zext i1 %y{m} to i8", f"  store i8 %y{m}.byte, ptr %y{m}.at"]
        else:
            elem.append(f"  store {memory} %y{m}, ptr %y{m}.at")
    kernel = [f"define void @{SYMBOL}({', '.join(params)}) {{", "entry:", *pre,
              "  %none = icmp sge i64 %r0, %r1", "  br i1 %none, label %done, label %row",
              "row:", "  %r = phi i64 [%r0, %entry], [%r.next, %row.end]", "  %lo = mul i64 %r, %inner",
              "  %end = add i64 %lo, %inner", "  %short = icmp slt i64 %total, %end",
              "  %hi = select i1 %short, i64 %total, i64 %end", "  %n = sub i64 %hi, %lo", *row,
              "  %some = icmp sgt i64 %n, 0", "  br i1 %some, label %elem, label %row.end",
              "elem:", "  %j = phi i64 [0, %row], [%j.next, %elem]", *elem, "  %j.next = add i64 %j, 1",
              "  %more = icmp slt i64 %j.next, %n", "  br i1 %more, label %elem, label %row.end",
              "row.end:", "  %r.next = add i64 %r, 1", "  %rows.more = icmp slt i64 %r.next, %r1",
              "  br i1 %rows.more, label %row, label %done", "done:", "  ret void", "}"]
    code = "\n\n".join([*functions, "\n".join(kernel)])
    header = f"; a minflux elementwise kernel, generated from the scalar function {fn.name}\n"
    return header + definitions(code) + "\n" + code + "\n"


# the modules whose text decides the machine code of every kernel generated here
_CODE_SHAPING = ("llvm_backend.py", "llvm_math.py", "ifconvert.py")
_SOURCE_DIR = Path(__file__).parent
_generator_text: str | None = None


def generator_version() -> str:
    """A hash of the modules that shape the kernels generated here, part of every kernel's key.

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


def build_kernel(dual, float_dtype, patterns: tuple) -> Kernel:
    """The kernel of transformed function ``dual`` for one float type and input layout; raises
    `Unspelled` where a primitive has no LLVM spelling."""
    ir = generate_ir(dual.function, np.dtype(float_dtype).name, patterns)
    kernel = load_ir_kernel(ir, SYMBOL, len(dual.function.params) + dual.function.n_outputs,
                            patterns.count("F"), generator_version())
    kernel.has_loops = has_loops(dual.function.body)
    return kernel
