"""Frontend: the Python source of a scalar function -> the structured IR of `minflux.compiler.ir`.

The scalar language is a Python subset: numbers, arithmetic, comparisons (chains too), ``and`` /
``or`` / ``not`` (short-circuit on primal values, giving booleans), conditional expressions, ``abs``
/ ``min`` / ``max`` / ``float``, ``math.*`` and ``mf.*`` primitives of the derivative table, calls
to `mf.scalar_rule` functions (kept as one primitive with the user's derivative) and to other
`mf.elementwise` functions (inlined); assignment, tuple unpacking, augmented assignment, ``if`` /
``elif`` / ``else``, ``return`` anywhere, ``while``, ``for k in range(...)``, ``break``,
``continue`` and ``pass``. Python numbers from the closure or module globals are compile-time
constants (`Binding` records them so a changed value recompiles). Anything else raises
`CompileError` with the file, line, construct and what to write instead.

>>> from minflux.compiler.ir import format_function
>>> def relu_step(x):
...     if x > 0:
...         return x
...     return 0.0
>>> print(format_function(parse(relu_step).function))
def relu_step(v_x):
    t0 = greater(v_x, 0)
    if t0:
        return v_x
    return 0.0
"""
from __future__ import annotations

import ast
import types
from dataclasses import dataclass, field
from typing import Callable

from .calls import call_object
from .source import Binding, as_constant, assigned_locals, resolve_free_name, source_node
from .unsupported import UNSUPPORTED_EXPR, UNSUPPORTED_STMT
from .errors import CompileError
from .loop_limit import FLAG, capped_exit, get_max_loop_iterations
from .ir import (Assign, Break, Call, Const, Continue, Function, If, Loop, Return, Var, count_outputs,
                 falls_through, returns)

_BINOPS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide",
           ast.FloorDiv: "floor_divide", ast.Mod: "mod", ast.Pow: "power"}
_CMPOPS = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
           ast.Eq: "equal", ast.NotEq: "not_equal"}

@dataclass
class Parsed:
    """The frontend's result: the untyped IR and the free-name bindings it depends on."""

    function: Function
    bindings: list = field(default_factory=list)
    loop_sites: list = field(default_factory=list)   # (function, loc) of each counted while loop
    loop_limit: int = 0                               # the cap compiled into the counters


class _Frontend:
    """Builds the IR of one function (and of the elementwise functions it inlines)."""

    def __init__(self, fn: Callable, node, filename: str, offset: int, counter: list, prefix: str,
                 bindings: list, stack: tuple, subroutines: dict, loops: tuple):
        self.fn = fn
        self.node = node
        self.filename = filename
        self.offset = offset
        self.counter = counter          # shared with inlined callees: [temps, selects, inlines]
        self.prefix = prefix
        self.bindings = bindings
        self.stack = stack              # functions being compiled, to reject recursion
        self.subroutines = subroutines
        self.loop_sites, self.loop_limit = loops  # shared with inlined callees
        self.temps: set = set()
        self.out: list = []
        self.loop_depth = 0
        args = node.args
        self.params = [a.arg for a in args.args]
        self.locals = set(self.params) | assigned_locals(node)

    # -- helpers ---------------------------------------------------------------------------------
    def loc(self, node) -> tuple:
        return (self.filename, getattr(node, "lineno", 0) + self.offset)

    def error(self, node, construct: str, fix: str):
        raise CompileError(f"{construct} is not supported in a scalar function; {fix}", self.loc(node),
                           construct)

    def temp(self) -> str:
        name = f"t{self.counter[0]}"
        self.counter[0] += 1
        self.temps.add(name)
        return name

    def select_var(self) -> str:
        """A variable assigned on several paths (not a temporary)."""
        name = f"s{self.counter[1]}"
        self.counter[1] += 1
        return name

    def var(self, name: str) -> str:
        """The IR name of a local: ``v_<name>`` in the compiled function, ``w<n>_<name>`` in the n-th
        inlined call, so an inlined body can never read or write a name of its caller."""
        return f"w{self.prefix}_{name}" if self.prefix else f"v_{name}"

    def nested(self, callee: Callable) -> "_Frontend":
        """A frontend for inlining ``callee`` here: its own name space, shared counters and bindings."""
        cnode, filename, offset = source_node(callee)
        self.counter[2] += 1
        return _Frontend(callee, cnode, filename, offset, self.counter, str(self.counter[2]),
                         self.bindings, self.stack + (self.fn,), self.subroutines,
                         (self.loop_sites, self.loop_limit))

    def emit(self, stmt):
        self.out.append(stmt)

    def block(self, stmts: list) -> list:
        saved, self.out = self.out, []
        try:
            for s in stmts:
                self.statement(s)
            return self.out
        finally:
            self.out = saved

    def call(self, op: str, args: tuple, node) -> Var:
        t = self.temp()
        self.emit(Assign(t, Call(op, tuple(args)), self.loc(node)))
        return Var(t)

    # -- function --------------------------------------------------------------------------------
    def function(self) -> Function:
        node = self.node
        a = node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs or a.defaults or a.kw_defaults:
            self.error(node, "*args, **kwargs, keyword-only arguments and defaults",
                       "give the function plain positional parameters and pass every argument")
        if isinstance(node, ast.Lambda):
            body = [ast.Return(value=node.body, lineno=node.lineno, col_offset=node.col_offset)]
        else:
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
        stmts = self.block(body)
        if falls_through(stmts):
            last = body[-1] if body else node
            raise CompileError("the scalar function can reach its end without a return; add a final "
                               "return statement", self.loc(last), "missing return")
        n_outputs = count_outputs(stmts)
        if self.loop_sites and not self.prefix:  # the compiled function reports capped loops
            stmts = [Assign(FLAG, Const(0), self.loc(node))] + stmts
            for s in returns(stmts):
                s.values = tuple(s.values) + (Var(FLAG),)
            n_outputs += 1
        return Function(self.fn.__name__, [self.var(p) for p in self.params], stmts,
                        temps=self.temps, n_outputs=n_outputs, subroutines=self.subroutines)

    # -- statements ------------------------------------------------------------------------------
    def statement(self, s):
        kind = type(s)
        if kind in UNSUPPORTED_STMT:
            construct, fix = UNSUPPORTED_STMT[kind]
            self.error(s, construct, fix)
        method = getattr(self, "stmt_" + kind.__name__, None)
        if method is None:
            self.error(s, f"the statement {kind.__name__}", "use assignments, if, while, for-range "
                       "and return")
        method(s)

    def stmt_Pass(self, s):
        pass

    def stmt_Expr(self, s):
        if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
            return  # a string used as a comment
        self.error(s, "an expression statement (its value is discarded)",
                   "assign the value to a variable or return it")

    def assign_to(self, target, value, node):
        if isinstance(target, ast.Name):
            if isinstance(value, tuple):
                self.error(node, "assigning several values to one name",
                           "unpack them: a, b = ...")
            self.emit(Assign(self.var(target.id), value, self.loc(node)))
        elif isinstance(target, (ast.Tuple, ast.List)):
            if not isinstance(value, tuple) or len(value) != len(target.elts):
                n = len(value) if isinstance(value, tuple) else 1
                raise CompileError(f"cannot unpack {n} value(s) into {len(target.elts)} names",
                                   self.loc(node), "tuple unpacking")
            staged = []
            for v in value:
                if isinstance(v, Var):
                    t = self.temp()
                    self.emit(Assign(t, v, self.loc(node)))
                    v = Var(t)
                staged.append(v)
            for t, v in zip(target.elts, staged):
                self.assign_to(t, v, node)
        elif isinstance(target, ast.Attribute):
            self.error(node, "assignment to an attribute", "assign to a local variable")
        elif isinstance(target, ast.Subscript):
            self.error(node, "assignment to an element (x[i] = ...)", "assign to a local variable")
        else:
            self.error(node, f"assignment to {type(target).__name__}", "assign to a local variable")

    def stmt_Assign(self, s):
        value = self.expr(s.value)
        for target in s.targets:
            self.assign_to(target, value, s)

    def stmt_AnnAssign(self, s):
        if s.value is None:
            return
        self.assign_to(s.target, self.expr(s.value), s)

    def stmt_AugAssign(self, s):
        if not isinstance(s.target, ast.Name):
            self.error(s, "augmented assignment to an element or attribute", "use a local variable")
        op = _BINOPS.get(type(s.op))
        if op is None:
            self.error(s, f"the operator {type(s.op).__name__}", "use + - * / // % **")
        current = self.name_load(ast.Name(id=s.target.id, ctx=ast.Load(), lineno=s.lineno))
        value = self.atom(s.value)
        self.emit(Assign(self.var(s.target.id), self.call(op, (current, value), s), self.loc(s)))

    def stmt_If(self, s):
        cond = self.atom(s.test)
        body = self.block(s.body)
        orelse = self.block(s.orelse)
        self.emit(If(cond, body, orelse, self.loc(s)))

    def loop_body(self, stmts) -> list:
        self.loop_depth += 1
        try:
            return self.block(stmts)
        finally:
            self.loop_depth -= 1

    def stmt_While(self, s):
        if s.orelse:
            self.error(s, "while ... else", "set a flag before break and test it after the loop")
        saved, self.out = self.out, []
        cond = self.atom(s.test)
        head = self.out
        self.out = saved
        body = self.loop_body(s.body)
        if isinstance(cond, Const) and not cond.value:
            return
        test = [] if isinstance(cond, Const) else [If(cond, [], [Break(self.loc(s))], self.loc(s))]
        self.emit(Loop(head + test + self.iteration_cap(s) + body, [], self.loc(s)))
        self.out.extend(capped_exit(cond, body, self.loc(s)))

    def iteration_cap(self, s) -> list:
        """Count the iterations of while loop ``s``; past the cap, report it and leave the loop."""
        loc = self.loc(s)
        self.loop_sites.append((self.fn.__name__, loc))
        count = self.select_var()
        self.emit(Assign(count, Const(0), loc))
        bumped, over = self.temp(), self.temp()
        return [Assign(bumped, Call("add", (Var(count), Const(1))), loc), Assign(count, Var(bumped), loc),
                Assign(over, Call("greater", (Var(count), Const(self.loop_limit))), loc),
                If(Var(over), [Assign(FLAG, Const(len(self.loop_sites)), loc), Break(loc)], [], loc)]

    def stmt_For(self, s):
        if s.orelse:
            self.error(s, "for ... else", "set a flag before break and test it after the loop")
        it = s.iter
        if not (isinstance(it, ast.Call) and isinstance(it.func, ast.Name)
                and self.resolve_object(it.func) is range and not it.keywords):
            self.error(s, "a for loop over anything but range()", "write for k in range(n) with an "
                       "integer n (a constant or an int argument)")
        if not isinstance(s.target, ast.Name):
            self.error(s, "a for loop with a tuple target", "loop over range() with one name")
        if not 1 <= len(it.args) <= 3:
            self.error(s, "range() with this many arguments", "use range(stop), range(start, stop) "
                       "or range(start, stop, step)")
        bounds = [self.call("index", (self.atom(a),), s) for a in it.args]
        step = 1
        if len(it.args) == 3:
            step_node = it.args[2]
            step = _constant_int(step_node, self)
            if step == 0:
                raise CompileError("range() step must not be zero", self.loc(s), "range")
        start, stop = (Const(0), bounds[0]) if len(bounds) == 1 else (bounds[0], bounds[1])
        counter = self.select_var()
        self.emit(Assign(counter, start, self.loc(s)))
        go = self.temp()
        head = [Assign(go, Call("less" if step > 0 else "greater", (Var(counter), stop)), self.loc(s)),
                If(Var(go), [], [Break(self.loc(s))], self.loc(s)),
                Assign(self.var(s.target.id), Var(counter), self.loc(s))]
        body = self.loop_body(s.body)
        nxt = self.temp()
        latch = [Assign(nxt, Call("add", (Var(counter), Const(step))), self.loc(s)),
                 Assign(counter, Var(nxt), self.loc(s))]
        self.emit(Loop(head + body, latch, self.loc(s)))

    def stmt_Break(self, s):
        if not self.loop_depth:
            self.error(s, "break outside a loop", "use break inside while or for")
        self.emit(Break(self.loc(s)))

    def stmt_Continue(self, s):
        if not self.loop_depth:
            self.error(s, "continue outside a loop", "use continue inside while or for")
        self.emit(Continue(self.loc(s)))

    def stmt_Return(self, s):
        if s.value is None:
            self.error(s, "return without a value", "return a number (or a tuple of numbers)")
        value = self.expr(s.value)
        values = value if isinstance(value, tuple) else (value,)
        self.emit(Return(tuple(values), self.loc(s)))

    # -- expressions -----------------------------------------------------------------------------
    def atom(self, node):
        value = self.expr(node)
        if isinstance(value, tuple):
            self.error(node, "a tuple used as a single value", "unpack it first: a, b = ...")
        return value

    def expr(self, node):
        kind = type(node)
        if kind in UNSUPPORTED_EXPR:
            construct, fix = UNSUPPORTED_EXPR[kind]
            self.error(node, construct, fix)
        method = getattr(self, "expr_" + kind.__name__, None)
        if method is None:
            self.error(node, f"the expression {kind.__name__}", "use arithmetic on scalars")
        return method(node)

    def expr_Constant(self, node):
        v = node.value
        if isinstance(v, (bool, int, float)):
            return Const(v)
        what = "None" if v is None else f"a {type(v).__name__} constant"
        self.error(node, what, "use numbers only")

    def expr_Tuple(self, node):
        return tuple(self.atom(e) for e in node.elts)

    def expr_Name(self, node):
        return self.name_load(node)

    def name_load(self, node):
        if node.id in self.locals:
            return Var(self.var(node.id))
        value = self.resolve_object(node)
        const = as_constant(value)
        if const is not None:
            return Const(const)
        self.error(node, f"the name {node.id!r} (a {type(value).__name__})",
                   "use scalar arguments and numeric constants; pass arrays as arguments")

    def resolve_object(self, node):
        """The object a free Name or a module attribute chain refers to (recorded as a binding)."""
        if isinstance(node, ast.Name):
            if node.id in self.locals:
                self.error(node, f"calling the local variable {node.id!r}", "call functions by their "
                           "global name")
            try:
                value = resolve_free_name(self.fn, node.id)
            except NameError:
                raise CompileError(f"the name {node.id!r} is not defined", self.loc(node),
                                   "unknown name") from None
            self.bindings.append(Binding(self.fn, node.id, value, root=not self.prefix))
            return value
        if isinstance(node, ast.Attribute):
            base = self.resolve_object(node.value)
            if not isinstance(base, types.ModuleType):
                self.error(node, f"the attribute .{node.attr} of a value", "use mf.* or math.* "
                           "functions on scalars")
            if not hasattr(base, node.attr):
                raise CompileError(f"module {base.__name__!r} has no attribute {node.attr!r}",
                                   self.loc(node), "unknown name")
            return getattr(base, node.attr)
        self.error(node, f"calling the result of {type(node).__name__}", "call a function by name")

    def expr_Attribute(self, node):
        if isinstance(node.value, ast.Name) and node.value.id in self.locals:
            self.error(node, f"the attribute .{node.attr} of a value", "scalars have no attributes; "
                       "use mf.* or math.* functions")
        value = self.resolve_object(node)
        const = as_constant(value)
        if const is not None:
            return Const(const)
        self.error(node, f"the attribute {node.attr!r} used as a value", "call it or use a number")

    def expr_BinOp(self, node):
        op = _BINOPS.get(type(node.op))
        if op is None:
            self.error(node, f"the operator {type(node.op).__name__}",
                       "use + - * / // % ** (and `and`/`or` for conditions)")
        return self.call(op, (self.atom(node.left), self.atom(node.right)), node)

    def expr_UnaryOp(self, node):
        operand = self.atom(node.operand)
        if isinstance(node.op, ast.USub):
            return self.call("negative", (operand,), node)
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(node.op, ast.Not):
            return self.call("logical_not", (operand,), node)
        self.error(node, "the operator ~", "use `not` for conditions")

    def expr_Compare(self, node):
        ops = []
        for op in node.ops:
            name = _CMPOPS.get(type(op))
            if name is None:
                self.error(node, f"the comparison {type(op).__name__}", "use < <= > >= == !=")
            ops.append(name)
        left = self.atom(node.left)
        if len(ops) == 1:
            return self.call(ops[0], (left, self.atom(node.comparators[0])), node)
        result = self.select_var()
        right = self.atom(node.comparators[0])
        self.emit(Assign(result, Call(ops[0], (left, right)), self.loc(node)))
        self.chain(result, right, ops[1:], node.comparators[1:], node)
        return Var(result)

    def chain(self, result, left, ops, comparators, node):
        saved, self.out = self.out, []
        right = self.atom(comparators[0])
        self.emit(Assign(result, Call(ops[0], (left, right)), self.loc(node)))
        if len(ops) > 1:
            self.chain(result, right, ops[1:], comparators[1:], node)
        body, self.out = self.out, saved
        self.emit(If(Var(result), body, [], self.loc(node)))

    def expr_BoolOp(self, node):
        is_and = isinstance(node.op, ast.And)
        result = self.select_var()
        self.emit(Assign(result, Call("truth", (self.atom(node.values[0]),)), self.loc(node)))
        self.bool_rest(result, node.values[1:], is_and, node)
        return Var(result)

    def bool_rest(self, result, values, is_and, node):
        saved, self.out = self.out, []
        self.emit(Assign(result, Call("truth", (self.atom(values[0]),)), self.loc(node)))
        if len(values) > 1:
            self.bool_rest(result, values[1:], is_and, node)
        rest, self.out = self.out, saved
        self.emit(If(Var(result), rest, [], self.loc(node)) if is_and
                  else If(Var(result), [], rest, self.loc(node)))

    def expr_IfExp(self, node):
        cond = self.atom(node.test)
        result = self.select_var()
        saved, self.out = self.out, []
        self.emit(Assign(result, self.atom(node.body), self.loc(node)))
        body, self.out = self.out, []
        self.emit(Assign(result, self.atom(node.orelse), self.loc(node)))
        orelse, self.out = self.out, saved
        self.emit(If(cond, body, orelse, self.loc(node)))
        return Var(result)

    def expr_Call(self, node):
        if node.keywords:
            self.error(node, "keyword arguments in a call", "pass arguments by position")
        target = self.resolve_object(node.func)
        name = ast.unparse(node.func)
        if getattr(target, "__scalar_function__", target) in self.stack + (self.fn,):
            self.error(node, f"recursion (a call to {name})", "write the recursion as a while loop")
        args = [self.expr(a) for a in node.args]
        if any(isinstance(a, tuple) for a in args):
            self.error(node, "a tuple as an argument", "unpack it first: a, b = ...")
        return call_object(self, target, name, args, node)


def _constant_int(node, fe) -> int:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_constant_int(node.operand, fe)
    value = fe.expr(node)
    if isinstance(value, Const) and isinstance(value.value, int) and not isinstance(value.value, bool):
        return value.value
    raise CompileError("range() step must be an integer constant", fe.loc(node), "range")


def parse(fn: Callable) -> Parsed:
    """Compile the Python scalar function ``fn`` to untyped IR (raises `CompileError`)."""
    if not isinstance(fn, types.FunctionType):
        raise CompileError(f"can only compile Python functions, got {type(fn).__name__}; pass a function "
                           "defined with def or lambda", None, "function")
    node, filename, offset = source_node(fn)
    bindings: list = []
    limit = get_max_loop_iterations()
    fe = _Frontend(fn, node, filename, offset, [0, 0, 0], "", bindings, (), {}, ([], limit))
    return Parsed(fe.function(), bindings, fe.loop_sites, limit)
