"""What a replay's statement says, read from its text and parameters: where its call is, its arguments
with each slot among them a `_Slot`, and which of its results lie in its planned buffers.

A statement is a line of the straight-line replay (`minflux.schedule.replay`): its text has a ``@``
for each slot it reads or binds and a ``$`` for each parameter.

>>> native_text("@ = $(@, @, out=$)")
(4, 18)
"""
from __future__ import annotations

import re

from .native_probe import _leaves

_PLACEHOLDER = re.compile(r"[@$]")


def native_text(text: str) -> tuple[int, int] | None:
    """Where the call of statement ``text`` starts (at its callable's ``$``) and ends, or None."""
    if text.startswith("$("):
        start = 0
    elif "= " in text:
        start = text.index("= ") + 2
    else:
        return None
    if text[start:start + 2] != "$(":
        return None
    depth = 0
    for end in range(start + 1, len(text)):
        depth += text[end] in "([{"
        depth -= text[end] in ")]}"
        if depth == 0:
            return start, end + 1
    return None


def _count(text: str) -> int:
    return len(_PLACEHOLDER.findall(text))


def _call(st) -> tuple | None:
    """(where the call of statement ``st`` starts and ends in its text, where its callable is among its
    params and where the params after the call start), or None where it calls nothing."""
    span = native_text(st.text)
    if span is None:
        return None
    start, end = span
    first = _count(st.text[:start])
    return start, end, first, first + _count(st.text[start:end])


class _Slot(int):
    """A slot standing for its value in `_symbolic_arguments`."""


def _symbolic_arguments(st) -> tuple[tuple, dict]:
    """The arguments of the call of statement ``st``, each slot among them a `_Slot`."""
    start, end, first, last = _call(st)
    params = iter(st.params[first + 1:last])
    names: dict = {}

    def name(match) -> str:
        names[f"p{len(names)}"] = _Slot(next(params)) if match.group() == "@" else next(params)
        return f"p{len(names) - 1}"

    arguments = _PLACEHOLDER.sub(name, st.text[start + 2:end - 1])
    return eval(f"(lambda *a, **k: (a, k))({arguments})", {}, names)   # noqa: S307 (our own text)


def _in_buffers(st) -> list:
    """The slots statement ``st``, a call given planned buffers (its last parameter, ``out=``), binds to
    results in them: each of its results, except those it makes new (a None among the buffers)."""
    out = st.params[-1]
    if not (out.__class__ is list or out.__class__ is tuple) or all(o is not None for o in out):
        return list(st.writes)
    names = st.text.split(" = ", 1)[0].replace(",", " ").split() if " = " in st.text else []
    if len(names) != len(out):
        return []
    kept, writes = [], iter(st.writes)
    for name, buffer in zip(names, out):   # "@, _, @ = ...": the results unpacked in order, "_" unbound
        if name == "@":
            slot = next(writes)
            if buffer is not None:
                kept.append(slot)
    return kept


def _reads_numbers_from_slots(st, positions: list, keywords: list) -> bool:
    """Whether an argument of statement ``st`` that held a number at the probe (at ``positions`` or
    ``keywords``) reads a slot: a value of this call (an element of an input), not a constant."""
    args, kwargs = _symbolic_arguments(st)
    return any(_Slot in map(type, _leaves(x)) for x in [*(args[i] for i in positions), *(kwargs[k] for k in keywords)])


def _argument_slots(st, positions: tuple) -> list:
    """The slots at ``positions`` among the flattened arguments of statement ``st`` (`_leaves`)."""
    args, kwargs = _symbolic_arguments(st)
    leaves = _leaves((args, tuple(kwargs.values())))
    return [leaves[i] for i in positions if leaves[i].__class__ is _Slot]
