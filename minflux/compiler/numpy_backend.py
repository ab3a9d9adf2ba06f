"""The reference backend: evaluate IR vectorised over whole arrays, with masks for control flow.

Branches are if-converted: both sides run on all lanes under a mask, and an assignment inside a
branch keeps the old value on lanes outside the mask (``where(mask, new, old)``), so nothing a lane
computed in a branch it did not take reaches its result. A ``while`` loop iterates until no lane is
active; ``break``, ``continue`` and ``return`` remove lanes from the active mask. Floating-point
warnings are suppressed (inactive lanes may divide by zero; their values are discarded).

The evaluator is generic over an *ops* object: `ArrayOps` runs the table's array implementations
(this backend), and the reverse-mode path of `minflux.pointwise.reverse` runs minflux ops on Tensors so
that each operation becomes a tape node and each masked assignment a ``where``.

>>> import numpy as np
>>> from minflux.compiler.frontend import parse
>>> from minflux.compiler.kinds import infer_kinds
>>> def f(x):
...     return x if x < 0 else 2 * x
>>> fn = infer_kinds(parse(f).function, ["f"])
>>> evaluate(fn, [np.array([-1.0, 3.0])], ArrayOps(np, np.float64))
[array([-1.,  6.])]
"""
from __future__ import annotations

import numpy as np

from .ir import Assign, Break, Call, Const, Continue, Function, If, Loop, Return, assigned_names
from .rules import TABLE


class ArrayOps:
    """Array arithmetic for the evaluator: ``xp`` is numpy or cupy, ``float_dtype`` the kernel's float."""

    def __init__(self, xp, float_dtype, subroutines: dict | None = None):
        self.xp = xp
        self.float_dtype = np.dtype(float_dtype)
        self.subroutines = subroutines or {}
        self._consts: dict = {}

    def const(self, value, kind: str):
        key = (value, kind, type(value))
        c = self._consts.get(key)
        if c is None:
            c = self._consts[key] = (self.float_dtype.type(value) if kind == "f" else
                                     np.int64(value) if kind == "i" else np.bool_(value))
        return c

    def call(self, op: str, args: list):
        xp = self.xp
        if op == "float":
            return xp.asarray(args[0]).astype(self.float_dtype)[()]
        if op == "int":
            return xp.asarray(args[0]).astype(np.int64)[()]
        sub = self.subroutines.get(op)
        if sub is not None:
            return evaluate(sub, list(args), ArrayOps(xp, self.float_dtype, self.subroutines))[0]
        return TABLE[op].impl(xp, *args)

    def select(self, mask, new, old):
        return self.xp.where(mask, new, old)

    def truth(self, value):
        """The primal boolean value of a condition (an array or a Python bool)."""
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if getattr(value, "ndim", 1) == 0:
            return bool(value)
        return value


def _and(a, b):
    if a is True:
        return b
    if b is True:
        return a
    if a is False or b is False:
        return False
    return a & b


def _or(a, b):
    if a is False:
        return b
    if b is False:
        return a
    if a is True or b is True:
        return True
    return a | b


def _not(a):
    if a is True:
        return False
    if a is False:
        return True
    return ~a


def _empty(mask) -> bool:
    return mask is False or (mask is not True and not bool(mask.any()))


class _Evaluator:
    def __init__(self, fn: Function, ops):
        self.fn = fn
        self.ops = ops
        self.env: dict = {}
        self.temps = fn.temps
        self.outputs: list = [None] * fn.n_outputs
        self.loops: list = []

    def value(self, atom):
        if isinstance(atom, Const):
            return self.ops.const(atom.value, atom.kind)
        return self.env[atom.name]

    def assign(self, name, value, mask):
        if mask is True or name in self.temps or name not in self.env:
            self.env[name] = value
        else:
            self.env[name] = self.ops.select(mask, value, self.env[name])

    def block(self, stmts: list, mask):
        for s in stmts:
            if _empty(mask):
                return False
            mask = self.stmt(s, mask)
        return mask

    def stmt(self, s, mask):
        if isinstance(s, Assign):
            v = s.value
            value = (self.ops.call(v.op, [self.value(a) for a in v.args]) if isinstance(v, Call)
                     else self.value(v))
            self.assign(s.target, value, mask)
            return mask
        if isinstance(s, If):
            cond = self.ops.truth(self.value(s.cond))
            then_mask = self.block(s.body, _and(mask, cond))
            else_mask = self.block(s.orelse, _and(mask, _not(cond)))
            return _or(then_mask, else_mask)
        if isinstance(s, Loop):
            return self.loop(s, mask)
        if isinstance(s, Break):
            self.loops[-1][0] = _or(self.loops[-1][0], mask)
            return False
        if isinstance(s, Continue):
            self.loops[-1][1] = _or(self.loops[-1][1], mask)
            return False
        if isinstance(s, Return):
            for i, atom in enumerate(s.values):
                value = self.value(atom)
                old = self.outputs[i]
                self.outputs[i] = value if (old is None or mask is True) else self.ops.select(mask, value, old)
            return False
        raise TypeError(f"not an IR statement: {s!r}")  # pragma: no cover

    def loop(self, s: Loop, mask):
        exits = False
        while not _empty(mask):
            self.loops.append([False, False])
            end = self.block(s.body, mask)
            breaks, continues = self.loops.pop()
            exits = _or(exits, breaks)
            mask = _or(end, continues)
            if not _empty(mask):
                self.block(s.latch, mask)
        return exits


def evaluate(fn: Function, args: list, ops) -> list:
    """Run typed IR ``fn`` on arrays ``args`` (already converted to their kinds); one value per output.

    Outputs are not broadcast to a common shape: a constant output may come back as a scalar.
    """
    ev = _Evaluator(fn, ops)
    for p, a in zip(fn.params, args):
        ev.env[p] = a
    for name in assigned_names(fn.body):
        if name not in ev.env and name not in fn.temps:
            ev.env[name] = ops.const(0, fn.kinds.get(name, "f"))
    with np.errstate(all="ignore"):
        ev.block(fn.body, True)
    return ev.outputs
