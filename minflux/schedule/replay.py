"""A recorded schedule as one straight-line Python function: one call per recorded operation.

The steps of a `Recording` become the lines of a generated function whose locals are the slots, so a
replay costs one call per operation and nothing else: no Tensors, no tape, no dispatch. Each slot is
deleted after its last use (a replay holds no more memory than the eager call did), numpy's error
state is set where the recording changed it, and results come back as a list of the output slots.

>>> import numpy as np
>>> from minflux.schedule.recorder import Recording
>>> rec = Recording("f")
>>> x = rec.input(np.ones(2))
>>> y = np.exp(x) + 1.0
>>> replay = Replay(rec, [y._slot])
>>> replay([np.zeros(2)])
[array([2., 2.])]
"""
from __future__ import annotations

import numpy as np

from .recorder import Recording, Ref

_SIMPLE = (int, float, bool, str, type(None))


class Replay:
    """The generated function of ``recording`` returning slots ``outputs`` (see the module docstring).

    ``source`` is its text, ``n_steps`` the number of operations it calls.
    """

    def __init__(self, recording: Recording, outputs: list[int]):
        self.n_inputs = recording.n_inputs
        self.n_steps = len(recording.steps)
        constants: list = []
        functions: list = []
        self.source = _generate(recording, outputs, constants, functions, self.n_inputs)
        namespace: dict = {}
        exec(compile(self.source, f"<mf.compile {recording.name}>", "exec"), namespace)
        self._run = namespace["replay"]
        self._constants, self._functions = constants, functions

    def __call__(self, inputs: list) -> list:
        old = np.geterr()
        try:
            return self._run(inputs, self._constants, self._functions)
        finally:
            np.seterr(**old)


def _generate(recording: Recording, outputs: list[int], constants: list, functions: list,
              n_inputs: int) -> str:
    last_use: dict[int, int] = {}
    for i, step in enumerate(recording.steps):
        for slot in _refs((step.args, step.kwargs)):
            last_use[slot] = i
    keep = set(outputs)
    frees: dict[int, list[int]] = {}
    for slot, i in last_use.items():
        if slot not in keep:
            frees.setdefault(i, []).append(slot)
    function_index: dict[int, int] = {}

    def constant(value) -> str:
        if value.__class__ in _SIMPLE and (value.__class__ is not float or np.isfinite(value)):
            return repr(value)
        constants.append(value)
        return f"c[{len(constants) - 1}]"

    def expression(x) -> str:
        cls = x.__class__
        if cls is Ref:
            return f"v{x.slot}"
        if cls is tuple:
            return "(" + "".join(expression(i) + ", " for i in x) + ")"
        if cls is list:
            return "[" + ", ".join(expression(i) for i in x) + "]"
        if cls is dict:
            return "{" + ", ".join(f"{k!r}: {expression(v)}" for k, v in x.items()) + "}"
        return constant(x)

    lines = ["def replay(inputs, c, f):"]
    if n_inputs:
        lines.append("    " + "".join(f"v{k}, " for k in range(n_inputs)) + "= inputs")
    errstate = None
    for i, step in enumerate(recording.steps):
        if step.errstate != errstate:
            errstate = step.errstate
            lines.append(f"    _seterr = c[{len(constants)}]; _seterr(**c[{len(constants) + 1}])")
            constants.extend([np.seterr, dict(errstate)])
        k = function_index.get(id(step.fn))
        if k is None:
            k = function_index[id(step.fn)] = len(functions)
            functions.append(step.fn)
        args = ", ".join([expression(a) for a in step.args] +
                         [f"{name}={expression(v)}" for name, v in step.kwargs.items()])
        call = f"f[{k}]({args})"
        targets = list(_targets(step.out, "_r"))
        if not targets:
            lines.append(f"    {call}")
        elif len(targets) == 1 and targets[0][1] == "_r":
            lines.append(f"    v{targets[0][0]} = {call}")
        elif step.out and all(o.__class__ is Ref or o is None for o in step.out):
            names = [f"v{o.slot}" if o is not None else "_" for o in step.out]   # one unpacking
            lines.append(f"    {', '.join(names)}{',' if len(names) == 1 else ''} = {call}")
        else:
            lines.append(f"    _r = {call}")
            lines.extend(f"    v{slot} = {path}" for slot, path in targets)
        unused = [slot for slot, _ in targets if slot not in last_use and slot not in keep]
        dead = sorted(set(frees.get(i, ())) | set(unused))
        if dead:
            lines.append("    del " + ", ".join(f"v{s}" for s in dead))
    lines.append("    return [" + ", ".join(f"v{s}" for s in outputs) + "]")
    return "\n".join(lines) + "\n"


def _refs(x):
    cls = x.__class__
    if cls is Ref:
        yield x.slot
    elif cls is tuple or cls is list:
        for item in x:
            yield from _refs(item)
    elif cls is dict:
        for item in x.values():
            yield from _refs(item)


def _targets(out, path: str):
    cls = out.__class__
    if cls is Ref:
        yield out.slot, path
    elif cls is tuple or cls is list:
        for i, item in enumerate(out):
            yield from _targets(item, f"{path}[{i}]")
