"""Which function a frame is calling right now, read from its bytecode.

``float(t)``, ``math.exp(t)`` and ``np.float64(t)`` all reach ``Tensor.__float__`` from C code, with the
user's frame as the only Python frame above it, so the conversion itself cannot tell them apart. The
frame's current instruction can: it is the call, and the instructions just before its arguments load the
function. `called_function` finds them and resolves the simple spellings (a name, or attributes of a
module: ``float``, ``math.exp``, ``np.float64``); anything else (a call through an expression, a
conditional argument, an operator such as ``%``) is `UNKNOWN`, and callers treat it as "not known safe".
"""
from __future__ import annotations

import dis
import functools
import types

UNKNOWN = object()

_CALL_PREFIXES = {"PRECALL", "KW_NAMES", "EXTENDED_ARG"}
_NAME_LOADS = {"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_BORROW",
               "LOAD_DEREF"}
_ATTRIBUTE_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs)


@functools.lru_cache(maxsize=512)
def _instructions(code: types.CodeType) -> tuple[tuple[dis.Instruction, ...], dict[int, int]]:
    instructions = tuple(dis.get_instructions(code))
    return instructions, {ins.offset: k for k, ins in enumerate(instructions)}


def _effect(ins: dis.Instruction) -> int:
    return dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None, jump=False)


def _callee_instructions(code: types.CodeType, lasti: int) -> list[dis.Instruction] | None:
    """The straight-line instructions that load the function of the call at offset ``lasti``.

    Walking back from the call, the net stack effect reaches the argument count at the first argument
    (every proper suffix of an expression pushes at most nothing), and two more at the start of the
    function's expression (the function and the NULL or ``self`` slot beside it)."""
    instructions, index = _instructions(code)
    k = index.get(lasti)
    if k is None or instructions[k].opname != "CALL":
        return None
    argc = instructions[k].arg or 0
    while k > 0 and instructions[k - 1].opname in _CALL_PREFIXES:  # this call's own, stack effect aside
        k -= 1
    depth, args_start = 0, (k if not argc else None)
    for j in range(k - 1, -1, -1):
        ins = instructions[j]
        if getattr(instructions[j + 1], "is_jump_target", False) or ins.opcode in _JUMPS:
            return None
        depth += _effect(ins)
        if args_start is None and depth == argc:
            args_start = j
        if depth >= argc + 2:
            return [i for i in instructions[j:args_start] if i.opname not in {"PUSH_NULL", "EXTENDED_ARG"}]
    return None


def _resolve(frame: types.FrameType, loads: list[dis.Instruction]):
    first, *attributes = loads
    if first.opname not in _NAME_LOADS or not isinstance(first.argval, str):
        return UNKNOWN
    name = first.argval
    scopes = ((frame.f_locals,) if first.opname != "LOAD_GLOBAL" else ()) + (frame.f_globals,
                                                                               frame.f_builtins)
    obj = next((scope[name] for scope in scopes if name in scope), UNKNOWN)
    for ins in attributes:
        if ins.opname not in _ATTRIBUTE_LOADS or not isinstance(ins.argval, str) or \
                not isinstance(obj, types.ModuleType):
            return UNKNOWN
        obj = getattr(obj, ins.argval, UNKNOWN)
    return obj


def called_function(frame: types.FrameType):
    """The function that ``frame`` is calling at this moment, or `UNKNOWN` when its bytecode does not
    say so plainly (only names and module attributes are resolved; nothing is evaluated).

    >>> import math, sys
    >>> def spy(x):
    ...     return called_function(sys._getframe(1))
    >>> class Number:
    ...     def __float__(self):
    ...         seen.append(called_function(sys._getframe(1)))
    ...         return 1.0
    >>> seen = []
    >>> _ = float(Number()), math.exp(Number()), "%f" % Number()
    >>> seen[0] is float, seen[1] is math.exp, seen[2] is UNKNOWN
    (True, True, True)
    """
    try:
        loads = _callee_instructions(frame.f_code, frame.f_lasti)
        return _resolve(frame, loads) if loads else UNKNOWN
    except (ValueError, TypeError, KeyError, IndexError):
        return UNKNOWN
