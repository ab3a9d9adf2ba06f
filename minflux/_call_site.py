"""Which function a frame is calling right now, read from its bytecode.

``float(t)``, ``math.exp(t)`` and ``np.float64(t)`` all reach ``Tensor.__float__`` from C code, with the
user's frame as the only Python frame above it, so the conversion itself cannot tell them apart. The
frame's current instruction can: it is the call, and the instructions just before its arguments load the
function. `called_function` finds them and resolves the simple spellings (a name, or attributes of a
module: ``float``, ``math.exp``, ``np.float64``); anything else (a call through an expression, a
conditional callee, an operator such as ``%``) is `UNKNOWN`, and callers treat it as "not known safe".

Why read bytecode at all, and how it stays right from one Python release to the next: ``float(t)`` is
the documented way to read a tracked Tensor's value, and the spellings that would drop its gradient
silently arrive at the same ``__float__`` with nothing else to tell them apart, so a rule that needs no
bytecode could only let all of them through or refuse ``float(t)`` too. The reader stays, and is kept
safe by accepting one shape only: a straight run of instructions (no jump in it, no jump target inside
it) ending in ``CALL`` or ``CALL_KW``, cut where the interpreter's own stack effects
(`dis.stack_effect`) say the arguments and the function begin, so it does not matter on which side of
the function each release pushes the NULL slot (before it up to 3.12, after it from 3.13), nor how
instructions are fused (``LOAD_FAST_LOAD_FAST``); a call specialised in place is read as the call it
was (3.11's ``PRECALL`` makes the call itself once it has run a few times). The function part must
be one name load followed by module attribute loads; any other instruction, which is what a new release
brings, gives `UNKNOWN`, and `UNKNOWN` is a refusal that says so (a TypeError naming ``t.item()``, or
numpy's own refusal of a ufunc), never a silently lost gradient. The tests run on every Python the
project claims that CI has (3.11, 3.12 and 3.13), and fail on any other until the reader has been
checked there.
"""
from __future__ import annotations

import dis
import functools
import types

UNKNOWN = object()

_CALLS = {"CALL": 0, "CALL_KW": 1}  # the stack slots between the arguments and the call: CALL_KW's names
_CALL_PREFIXES = {"PRECALL", "KW_NAMES", "EXTENDED_ARG"}  # 3.11-3.12, no stack effect of their own
_NAME_SCOPES = {"LOAD_GLOBAL": ("globals", "builtins"), "LOAD_NAME": ("locals", "globals", "builtins"),
                "LOAD_FAST": ("locals",), "LOAD_FAST_CHECK": ("locals",), "LOAD_FAST_BORROW": ("locals",),
                "LOAD_DEREF": ("locals",)}
_ATTRIBUTE_LOADS = {"LOAD_ATTR", "LOAD_METHOD"}
_FILLERS = {"PUSH_NULL", "EXTENDED_ARG", "NOP"}
_JUMPS = set(dis.hasjrel) | set(dis.hasjabs) | set(getattr(dis, "hasjump", ()))


@functools.lru_cache(maxsize=512)
def _instructions(code: types.CodeType) -> tuple[tuple[dis.Instruction, ...], dict[int, int]]:
    instructions = tuple(dis.get_instructions(code))
    return instructions, {ins.offset: k for k, ins in enumerate(instructions)}


@functools.lru_cache(maxsize=1024)
def _call_parts(code: types.CodeType, lasti: int):
    """``(function, arguments)``: the straight-line instructions that load the function of the call at
    offset ``lasti`` and those that load its arguments, or None when they are not one straight run.

    Walking back from the call, the net stack effect reaches the number of argument slots exactly at the
    first argument (every proper suffix of an expression pushes at most nothing), and two more exactly at
    the start of the function's expression (the function and the NULL or ``self`` slot beside it). A
    walk that steps over either count is code of another shape, and gives None."""
    instructions, index = _instructions(code)
    end = index.get(lasti)
    if end is not None and instructions[end].opname == "PRECALL" and end + 1 < len(instructions):
        end += 1  # 3.11 specialises PRECALL to make the call itself once the call has run a few times
    if end is None or instructions[end].opname not in _CALLS:
        return None
    call = instructions[end]
    slots = (call.arg or 0) + _CALLS[call.opname]
    k = end
    while k > 0 and instructions[k - 1].opname in _CALL_PREFIXES:  # this call's own, stack effect aside
        k -= 1
    if any(ins.is_jump_target for ins in instructions[k:end + 1]):
        return None
    depth, args_start = 0, (k if not slots else None)
    for j in range(k - 1, -1, -1):
        ins = instructions[j]
        if ins.opcode in _JUMPS or (j + 1 < k and instructions[j + 1].is_jump_target):
            return None
        depth += dis.stack_effect(ins.opcode, ins.arg, jump=False)
        if args_start is None:
            if depth > slots:
                return None
            if depth == slots:
                args_start = j
        elif depth == slots + 2:
            return instructions[j:args_start], instructions[args_start:end]
        elif depth > slots + 2:
            return None
    return None


def _names(ins: dis.Instruction) -> set:
    return set(ins.argval) if isinstance(ins.argval, tuple) else {ins.argval}


def _resolve(frame: types.FrameType, function, arguments):
    first, *attributes = [ins for ins in function if ins.opname not in _FILLERS]
    scopes = _NAME_SCOPES.get(first.opname)
    if scopes is None or not isinstance(first.argval, str) or \
            any(ins.opname not in _ATTRIBUTE_LOADS or not isinstance(ins.argval, str) for ins in attributes):
        return UNKNOWN
    # a name the arguments store to (f(x, len([f := g]))) holds another value now than the one called;
    # a global that a function called by the arguments rebinds is beyond what the bytecode says
    names = {ins.argval for ins in function if isinstance(ins.argval, str)}
    if any(ins.opname.startswith(("STORE_", "DELETE_")) and _names(ins) & names for ins in arguments):
        return UNKNOWN
    namespaces = {"locals": lambda: frame.f_locals, "globals": lambda: frame.f_globals,
                  "builtins": lambda: frame.f_builtins}
    obj = UNKNOWN
    for scope in scopes:
        namespace = namespaces[scope]()
        if first.argval in namespace:
            obj = namespace[first.argval]
            break
    for ins in attributes:
        # a module's own global, read from its namespace (no module __getattr__ or property runs)
        if not isinstance(obj, types.ModuleType) or \
                any(ins.argval in vars(cls) for cls in type(obj).__mro__):
            return UNKNOWN
        obj = vars(obj).get(ins.argval, UNKNOWN)
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
        parts = _call_parts(frame.f_code, frame.f_lasti)
        return _resolve(frame, *parts) if parts and parts[0] else UNKNOWN
    except (ValueError, TypeError, KeyError, IndexError):
        return UNKNOWN
