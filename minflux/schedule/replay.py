"""A recorded schedule replayed: one call per recorded operation and nothing else.

Each step of a `Recording` is rendered once as a Python statement in which ``@`` stands for a slot
and ``$`` for a value (the callable, a constant). A replay starts as a program: one small function
per step, made from a template per distinct statement (a training step of thousands of operations
has a few dozen), so the recording call builds it in milliseconds. Once the schedule has been
replayed `COMPILE_AFTER` times it is compiled into one straight-line function whose locals are the
slots, with its intermediate arrays written into buffers allocated once (`buffers`: ``f3`` below,
exp's result; the returned sum is new on every call): the form with the least overhead per
operation and no allocation beyond the results, which costs about 45-75 us per operation to plan
and compile, so a schedule replayed only a few times (a partial last batch) never pays it. Both
forms free each slot after its last use, set numpy's error state where the recording changed it, and
return the output slots as a list. The next replay, once the native runner is loaded (on a thread of
its own), probes for native commands, and from then on the kernels, products and arithmetic it found
run natively between the Python calls that remain (`native`).

>>> import numpy as np
>>> from minflux.schedule.recorder import Recording
>>> rec = Recording("f")
>>> x = rec.input(np.ones(2))
>>> y = np.exp(x) + 1.0
>>> replay = Replay(rec, [y.slot])
>>> replay([np.zeros(2)])
[array([2., 2.])]
>>> print(replay.source)
def make(f0, f1, f2, f3, f4):
    def replay(inputs):
        v0, = inputs
        f0(**f1)
        v1 = f2(v0, out=f3)
        del v0
        v2 = f4(v1, 1.0)
        del v1
        return [v2]
    return replay
<BLANKLINE>
"""
from __future__ import annotations

import re
import threading
import time
from typing import NamedTuple

import numpy as np

from ..runtime import native_runner, settings
from . import native, native_groups
from .buffers import Plan, plan_buffers
from .recorder import NotReplayable, Recording, Ref, kinds_of

COMPILE_AFTER = 64
"""Replays run as a program of per-step functions before the schedule is compiled into one function,
at most this many of them: fewer where they have run `COMPILE_SECONDS_PER_OPERATION` per operation."""
COMPILE_SECONDS_PER_OPERATION = 6e-4
"""How long a schedule's replays run as a program, per operation, before it is compiled. Compiling
costs about 0.2 ms per operation (planning its buffers and compiling its straight-line function,
then building its native form at the next replay: the HM-LSTM step on an AMD EPYC, one thread, CPU
time, 585 ms for 2,928 operations at the small size, 1,691 ms for 7,106 at the default's;
`benchmarks/replay_overhead.py`), and the compiled forms save about 30% of a replay as a program
(0.7 of 2.25 us per operation on the 16 x 16 Dense chain, 38 of 135 ms on the default step). By the
time the program has run this long it has lost about what compiling costs (the rent-or-buy rule:
whatever the number of replays that follow, within about twice the cost of the best choice).
Both are CPU time of the thread that runs them (`time.thread_time`): a busy machine slows replays
and compiling alike, and wall time would have a loaded machine compile sooner (the default
experiment's step after 11 replays rather than 28 with four busy loops beside it) and a short run pay
for compiling it never earns back."""

_SIMPLE = (int, float, bool, str, type(None))
_PLACEHOLDER = re.compile(r"[@$]")


class _Statement(NamedTuple):
    """One step as text: ``@`` a slot and ``$`` a value, in the order of ``params``; ``dead`` are the
    slots whose last use it is, ``reads`` and ``writes`` the slots it reads and binds."""

    text: str
    params: list
    dead: list
    reads: tuple = ()
    writes: tuple = ()


class Replay:
    """The replay of ``recording`` returning slots ``outputs`` (see the module docstring).

    ``n_steps`` is the number of operations it calls, ``replays`` the calls so far, ``source`` the
    text of the straight-line function (generated on first use), ``buffers`` the `Plan` of its
    buffers (planned with the straight-line function; empty before), which ``after_planning(plan)``
    is told of. ``native``: the `native.NativeForm` its calls run once one replay has probed for
    commands (``MINFLUX_NATIVE_REPLAY``), else None; ``straight_line``: the Python function the
    native form runs instead of (and falls back on); ``compiled_after``: how many replays ran as a
    program before the straight-line function was compiled (None before).
    """

    def __init__(self, recording: Recording, outputs: list[int], after_planning=None):
        self.n_inputs = recording.n_inputs
        self.n_steps = len(recording.steps)
        self.replays = 0
        self.buffers = Plan({}, np.empty(0, np.uint8))
        self._outputs = list(outputs)
        self._recording, self._after_planning = recording, after_planning
        self._statements, self._position = _statements(recording, self._outputs)
        self._lock = threading.Lock()   # one replay at a time writes the buffers
        self._blank = [None] * (recording.slots - recording.n_inputs)
        self._program = _program(self._statements)
        self._compiled = None
        self._interpreted = 0.0         # CPU seconds the replays so far took as a program
        self.compiled_after = None      # the replays run as a program before it compiled
        self._source_and_values = None
        self._planned: list[_Statement] | None = None
        self._probe_next = False
        self.native = self.straight_line = None

    @property
    def source(self) -> str:
        if self._source_and_values is None:
            statements = self._with_buffers()
            self._source_and_values = _straight_line(statements, self._outputs, self.n_inputs)
        return self._source_and_values[0]

    def _with_buffers(self) -> list[_Statement]:
        """The statements with ``out=`` buffers, planned now (`buffers`)."""
        self.buffers = plan_buffers(self._recording, self._outputs, native_groups.apart)
        statements = list(self._statements)
        for i, buffer in self.buffers.outs.items():   # a planned call's text ends with its parenthesis
            st = statements[self._position[i]]
            text = st.text[:-1] + ("out=$)" if st.text.endswith("()") else ", out=$)")
            statements[self._position[i]] = st._replace(text=text, params=st.params + [buffer])
        self._planned_outs = {self._position[i] for i in self.buffers.outs}
        self._recording = self._position = None
        if self._after_planning is not None:
            self._after_planning(self.buffers)
        self._planned = statements
        return statements

    def __call__(self, inputs: list) -> list:
        old = np.geterr()
        with self._lock:
            try:
                run = self._compiled
                if run is None:
                    self.replays += 1
                    if self.replays <= COMPILE_AFTER and \
                            self._interpreted < self.n_steps * COMPILE_SECONDS_PER_OPERATION:
                        start = time.thread_time()
                        try:
                            return self._interpret(inputs)
                        finally:
                            self._interpreted += time.thread_time() - start
                    run = self._compiled = self._compile()
                    self.compiled_after = self.replays - 1
                    self._probe_next = True
                elif self.native is not None and not settings.get("native_replay"):
                    run = self.straight_line
                elif self._probe_next and settings.get("native_replay") and native_runner.runner_ready():
                    result = self._go_native(inputs)   # a call that raises probes again next time
                    self._probe_next = False
                    return result
                return run(inputs)
            finally:
                np.seterr(**old)

    def _interpret(self, inputs: list) -> list:
        s = list(inputs)
        s += self._blank
        for step in self._program:
            step(s)
        return [s[o] for o in self._outputs]

    def _compile(self):
        return self._function(self.source, self._source_and_values[1])

    def _function(self, source: str, values: list):
        namespace: dict = {}
        exec(compile(source, f"<mf.compile {self.n_steps} operations>", "exec"), namespace)
        return namespace["make"](*values)

    def _go_native(self, inputs: list) -> list:
        """One replay through a `native.Probe`; after it, the native form replays where it has commands."""
        probe = native.Probe()
        probed = with_dead_slots(native.probed(self._planned, probe), self._outputs)
        result = self._function(*_straight_line(probed, self._outputs, self.n_inputs))(inputs)
        if probe.commands:
            form = native.NativeForm(self._planned, self._planned_outs, probe, self.buffers.arena, inputs,
                                     self._outputs)
            if form.n_commands:
                self.native = form
                statements = with_dead_slots(form.statements, self._outputs)
                fast = self._function(*_straight_line(statements, self._outputs, self.n_inputs))
                python = self.straight_line = self._compiled
                self._compiled = lambda inputs: form.replay(fast, python, inputs)
        return result


# -- rendering ------------------------------------------------------------------------------------
def _statements(recording: Recording, outputs: list[int]) -> tuple[list[_Statement], list]:
    """Every step (and every change of numpy's error state) as a `_Statement`, with its dead slots;
    and the index of each step's statement."""
    rendered: list[tuple[str, list, list, list]] = []   # text, params, slots read, slots written
    position = []
    errstate = None
    for step in recording.steps:
        if step.errstate != errstate:
            errstate = step.errstate
            rendered.append(("$(**$)", [np.seterr, dict(errstate)], [], []))
        position.append(len(rendered))
        rendered.append(_render(step))
    statements = [_Statement(text, params, [], tuple(reads), tuple(writes)) for text, params, reads, writes in rendered]
    return with_dead_slots(statements, outputs), position


def with_dead_slots(statements: list[_Statement], outputs: list[int]) -> list[_Statement]:
    """``statements`` with ``dead`` set from their ``reads`` and ``writes``: each slot but ``outputs``
    dies at its last read, or where it is bound when nothing reads it."""
    last_use: dict[int, int] = {}
    for i, st in enumerate(statements):
        for slot in st.reads:
            last_use[slot] = i
    keep = set(outputs)
    dead: list[list] = [[] for _ in statements]
    for slot, i in last_use.items():
        if slot not in keep:
            dead[i].append(slot)
    for i, st in enumerate(statements):
        dead[i].extend(slot for slot in st.writes if slot not in last_use and slot not in keep)
    return [st._replace(dead=sorted(set(d))) for st, d in zip(statements, dead)]


def _render(step) -> tuple[str, list, list, list]:
    params: list = [step.fn]
    reads: list = []
    pieces = []
    if step.kinds is not None:   # called through the check of its results' kinds
        params[:0] = [_OfKinds(step.fn, step.kinds)]
        pieces.append("$")
    for a in step.args:
        cls = a.__class__
        if cls is Ref:
            params.append(a.slot)
            reads.append(a.slot)
            pieces.append("@")
        elif cls is tuple or cls is list or cls is dict:
            pieces.append(_expression(a, params, reads))
        else:
            params.append(a)
            pieces.append("$")
    if step.kwargs:
        pieces += [f"{name}={_expression(v, params, reads)}" for name, v in step.kwargs.items()]
    call = "$(" + ", ".join(pieces) + ")"
    out = step.out
    if out.__class__ is Ref:
        params.insert(0, out.slot)
        return "@ = " + call, params, reads, [out.slot]
    targets = list(_targets(out, "_r"))
    writes = [slot for slot, _ in targets]
    if not targets:
        return call, params, reads, writes
    if out and all(o.__class__ is Ref or o is None for o in out):   # one unpacking
        names = ["@" if o is not None else "_" for o in out]
        params[:0] = writes
        return ", ".join(names) + ("," if len(names) == 1 else "") + " = " + call, params, reads, writes
    params.extend(writes)
    return "_r = " + call + "".join(f"; @ = {path}" for _, path in targets), params, reads, writes


class _OfKinds:
    """``fn`` (an operation from outside minflux) checked to give results of the types, shapes and
    dtypes it gave when recorded: a replay plans what follows on them."""

    __slots__ = ("fn", "kinds")

    def __init__(self, fn, kinds: tuple):
        self.fn, self.kinds = fn, kinds

    @property
    def steady_results(self) -> bool:   # `minflux.schedule.native`
        return getattr(self.fn, "steady_results", False)

    def __call__(self, fn, *args, **kwargs):
        result = fn(*args, **kwargs)
        if kinds_of(result) != self.kinds:
            name = getattr(fn, "__qualname__", repr(fn))
            raise NotReplayable(
                f"operation {name} gave {_described(kinds_of(result))} where its recording gave "
                f"{_described(self.kinds)}: an operation's results must take their types, shapes and dtypes "
                "from its arguments' and its constants, not from their values; make that choice outside it")
        return result


def _described(kinds) -> str:
    """``kinds`` (`kinds_of`) in words."""
    first = kinds[0] if kinds else None
    if first is np.ndarray:
        return f"a {kinds[2]} array of shape {kinds[1]}"
    if isinstance(first, type) and len(kinds) == 1:
        return first.__name__
    return "(" + ", ".join(f"{k[0]!r}: {_described(k[1])}" if len(k) == 2 and not isinstance(k[0], (type, tuple))
                           else _described(k) for k in kinds) + ")"


def _expression(x, params: list, reads: list) -> str:
    cls = x.__class__
    if cls is Ref:
        params.append(x.slot)
        reads.append(x.slot)
        return "@"
    if cls is tuple:
        return "(" + "".join([_expression(i, params, reads) + ", " for i in x]) + ")"
    if cls is list:
        return "[" + ", ".join([_expression(i, params, reads) for i in x]) + "]"
    if cls is dict:
        return "{" + ", ".join([f"{_expression(k, params, reads)}: {_expression(v, params, reads)}"
                                for k, v in x.items()]) + "}"
    params.append(x)
    return "$"


def _targets(out, path: str):
    cls = out.__class__
    if cls is Ref:
        yield out.slot, path
    elif cls is tuple or cls is list:
        for i, item in enumerate(out):
            yield from _targets(item, f"{path}[{i}]")


# -- the program: a function per step, from shared templates ------------------------------------------
_templates: dict = {}   # (statement text, dead slots) -> its template; a few hundred at most in practice


def _program(statements: list[_Statement]) -> list:
    templates = _templates
    program = []
    for st in statements:
        key = (st.text, len(st.dead))
        make = templates.get(key)
        if make is None:
            if len(templates) >= 4096:
                templates.clear()
            make = templates[key] = _template(st.text, len(st.dead))
        program.append(make(*st.params, *st.dead))
    return program


def _template(text: str, n_dead: int):
    count = iter(range(1 << 30))

    def name(match) -> str:
        k = next(count)
        return f"s[p{k}]" if match.group() == "@" else f"p{k}"

    body = _PLACEHOLDER.sub(name, text)
    n = next(count)
    if n_dead:
        body += "; " + " = ".join(f"s[p{n + k}]" for k in range(n_dead)) + " = None"
    names = ", ".join(f"p{k}" for k in range(n + n_dead))
    namespace: dict = {}
    exec(f"def make({names}):\n    def step(s):\n        {body}\n    return step\n", namespace)
    return namespace["make"]


# -- the straight-line function -------------------------------------------------------------------------
def _straight_line(statements: list[_Statement], outputs: list[int], n_inputs: int) -> tuple[str, list]:
    """(the source of ``make(f0, f1, ...)`` returning ``replay(inputs)``, the values for ``f0, f1, ...``)."""
    values: list = []
    names: dict[int, str] = {}

    def value(x) -> str:
        if x.__class__ in _SIMPLE and (x.__class__ is not float or np.isfinite(x)):
            return repr(x)
        found = names.get(id(x))
        if found is None:
            found = names[id(x)] = f"f{len(values)}"
            values.append(x)
        return found

    lines = []
    if n_inputs:
        lines.append("".join(f"v{k}, " for k in range(n_inputs)) + "= inputs")
    for st in statements:
        params = iter(st.params)
        lines.append(_PLACEHOLDER.sub(
            lambda m: f"v{next(params)}" if m.group() == "@" else value(next(params)), st.text))
        if st.dead:
            lines.append("del " + ", ".join(f"v{s}" for s in st.dead))
    lines.append("return [" + ", ".join(f"v{s}" for s in outputs) + "]")
    header = f"def make({', '.join(names.values())}):\n    def replay(inputs):\n"
    return header + "".join(f"        {line}\n" for line in lines) + "    return replay\n", values
