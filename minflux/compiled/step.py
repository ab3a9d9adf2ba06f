"""`mf.compile`: a function of trees recorded once per guard key and replayed without Python per op.

The first call for a guard key (`minflux.compiled.guard`) runs the function eagerly on traced
stand-ins of its arrays, recording every array operation it performs: the forward pass, the
backward pass, the optimiser's update. Later calls with the same key replay that schedule over plain
arrays (`minflux.schedule.replay`: a program of per-step functions, compiled into one generated
function after its first replays): kernels, layouts and products chosen once, no Tensors, no tape.
The replay returns what the function returned and makes the same changes to its arguments (arrays
updated in place, attributes such as an optimiser's state rebound), so a training step written as
ordinary code compiles unchanged.

A recording is kept only once the process has settled: while elementwise fusion is still deciding
what to compile (the first ``compile_after`` sightings of an expression), the recording call's results
are used and the next call records again, so a replay computes what the eager function computes from
then on. Called under `mf.gradient`, or while another compiled function records, a compiled function
runs eagerly, so the tape or the outer recording sees each of its operations.

>>> import numpy as np, minflux as mf
>>> model = {"w": np.array([1.0, -2.0])}
>>> state = mf.optim.setup(mf.optim.Descent(0.1), model)
>>> @mf.compile
... def step(model, state, x):
...     loss, (grads,) = mf.withgradient(lambda m: mf.sum(mf.tanh(m["w"] * x)), model)
...     mf.optim.update(state, model, grads)
...     return loss
>>> losses = [float(step(model, state, np.ones(2))) for _ in range(3)]
>>> step.recordings, [round(v, 4) for v in losses]
(1, [-0.2024, -0.2211, -0.2423])
"""
from __future__ import annotations

import copy
import functools
import gc
import logging
import threading
import types
import warnings
from collections import OrderedDict
from typing import Callable

import numpy as np

from ..runtime.allocator import prepare_process, release_freed_memory
from ..autograd import active_tape
from ..runtime import settings
from ..pointwise.lazy import fusion_changes
from ..schedule import NotReplayable, Recording, Replay, Traced
from . import guard
from .outputs import ReplayMismatch, compare, fill, template

__all__ = ["compile", "CompiledStep", "NotReplayable", "ReplayMismatch"]

log = logging.getLogger(__name__)

MAX_SETTLING_CALLS = 64
"""Recordings made while fusion is still deciding, after which the function runs eagerly (with one
warning) for that guard key rather than record on every call."""
_recording = threading.local()   # .depth: the compiled functions recording on this thread


class _Entry:
    """What one guard key has: a replay (once recorded), or the decision to run eagerly."""

    __slots__ = ("replay", "eager", "writes", "write_plan", "template", "n_outputs", "settling")

    def __init__(self):
        self.replay, self.eager, self.writes, self.template, self.n_outputs = None, False, (), None, 0
        self.write_plan: list = []
        self.settling = 0


class CompiledStep:
    """A function compiled by `compile` (see the module docstring).

    ``recordings`` counts the schedules recorded so far and ``replays`` the calls they served;
    ``schedule(*args)`` is the generated source for those arguments (None before recording);
    ``buffer_bytes`` the memory its replays keep for their intermediates between calls.

    >>> import minflux as mf, numpy as np
    >>> f = mf.compile(lambda x: mf.tanh(x) * 2.0)
    >>> f(np.zeros(2)), f(np.ones(2)).round(3), (f.recordings, f.replays)
    (array([0., 0.]), array([1.523, 1.523]), (1, 1))
    """

    def __init__(self, fn: Callable, check: bool | None, fallback: str, max_entries: int,
                 warn_after: int):
        if fallback not in ("error", "eager"):
            raise ValueError(f"mf.compile: fallback must be 'error' or 'eager', got {fallback!r}")
        if max_entries < 1 or warn_after < 1:
            raise ValueError("mf.compile: max_entries and warn_after must be positive")
        functools.update_wrapper(self, fn)
        self.fn, self.fallback = fn, fallback
        self.check = settings.get("compile_check") if check is None else bool(check)
        self.max_entries, self.warn_after = max_entries, warn_after
        self.name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
        self._entries: OrderedDict = OrderedDict()
        self._last_key = None
        self._warned_tape = False
        self.recordings = self.replays = 0

    def guard_children(self) -> list:
        """What a guard walk of another compiled function reads of this one: its function (its
        counters and recordings change with every call and are not data).

        >>> import minflux as mf
        >>> mf.compile(abs).guard_children()
        [('fn', <built-in function abs>)]
        """
        return [("fn", self.fn)]

    def __get__(self, obj, owner=None):
        """On an instance, the compiled method bound to it (the instance is walked as an argument)."""
        return self if obj is None else types.MethodType(self, obj)

    def __call__(self, *args, **kwargs):
        if getattr(_recording, "depth", 0):   # inside another recording: its steps are this call's
            return self.fn(*args, **kwargs)
        if active_tape() is not None:
            if not self._warned_tape:
                self._warned_tape = True
                warnings.warn(f"mf.compile({self.name}) runs eagerly under mf.gradient, so that its "
                              "operations are differentiated; compile the function that takes the "
                              "gradient to replay it", RuntimeWarning, stacklevel=2)
            return self.fn(*args, **kwargs)
        roots = self._roots(args, kwargs)
        flat = guard.flatten(roots)
        entry = self._entries.get(flat.key)
        if entry is None:
            entry = self._entries[flat.key] = _Entry()
            if len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(flat.key)
        if entry.eager:
            return self.fn(*args, **kwargs)
        if flat.refused is not None:
            return self._refused(entry, NotReplayable(f"mf.compile({self.name}): {flat.refused}, which "
                                                      "a recording cannot key; a replay could be stale"),
                                 args, kwargs)
        if entry.replay is None:
            return self._record(entry, roots, flat)
        self.replays += 1
        if self.check:
            return self._checked(entry, roots, flat)
        return self._replay(entry, roots, flat)

    def _roots(self, args: tuple, kwargs: dict) -> list:
        """What a call reads, as the guard walks it: the arguments, the keywords, the function."""
        return list(args) + [kwargs, self.fn]

    def _refused(self, entry: _Entry, error: NotReplayable, args: tuple, kwargs: dict):
        if self.fallback == "error":
            raise error
        warnings.warn(f"mf.compile({self.name}) runs eagerly for these arguments: {error}",
                      RuntimeWarning, stacklevel=3)
        entry.eager = True
        return self.fn(*args, **kwargs)

    def checked(self, *args, **kwargs):
        """This one call as with ``check=True``: a replay runs beside the eager function on copies of
        what it reads and raises `ReplayMismatch` unless both give the same bits (a call that records
        is not checked: it is the eager function).

        >>> import minflux as mf, numpy as np
        >>> f = mf.compile(lambda x: mf.tanh(x) * 2.0)
        >>> f(np.ones(2)).round(3), f.checked(np.ones(2)).round(3)
        (array([1.523, 1.523]), array([1.523, 1.523]))
        """
        before, self.check = self.check, True
        try:
            return self(*args, **kwargs)
        finally:
            self.check = before

    @property
    def buffer_bytes(self) -> int:
        """The memory the replays kept now hold for their intermediate arrays (allocated once each)."""
        return sum(e.replay.buffers.nbytes for e in self._entries.values() if e.replay is not None)

    def schedule(self, *args, **kwargs) -> str | None:
        """The generated source of the replay for these arguments, or None if not yet recorded."""
        entry = self._entries.get(guard.flatten(self._roots(args, kwargs)).key)
        return entry.replay.source if entry is not None and entry.replay is not None else None

    # -- replay -------------------------------------------------------------------------------
    def _replay(self, entry: _Entry, roots: list, flat: guard.Flat):
        values = entry.replay(flat.leaves)
        outputs = values[:entry.n_outputs]
        guard.put_planned(roots, entry.write_plan, values[entry.n_outputs:])
        return fill(entry.template, outputs, roots)

    def _checked(self, entry: _Entry, roots: list, flat: guard.Flat):
        """Replay, and run the eager function beside it on copies of everything it reads (the
        arguments, and the free variables that hold data, swapped in for the call)."""
        originals = [name.read(fn) for fn, name in flat.free]
        shared = {id(v): v for v in flat.values.values()}   # keyed values: the twin shares them (a lock)
        twin_roots, twin_free = copy.deepcopy((roots[:-1], originals), shared)
        for (fn, name), value in zip(flat.free, twin_free):
            name.write(fn, value)
        try:
            expected = self.fn(*twin_roots[:-1], **twin_roots[-1])
            twin_free = [name.read(fn) for fn, name in flat.free]
        finally:
            for (fn, name), value in zip(flat.free, originals):
                name.write(fn, value)
        got = self._replay(entry, roots, flat)
        what = f"mf.compile({self.name}, check=True)"
        compare(expected, got, f"{what}: the result")
        compare(twin_roots, roots[:-1], f"{what}: the arguments after the call")
        compare(twin_free, [name.read(fn) for fn, name in flat.free], f"{what}: the free variables after the call")
        return got

    # -- recording ----------------------------------------------------------------------------
    def _record(self, entry: _Entry, roots: list, flat: guard.Flat):
        # A recording makes a hundred thousand objects that live on (its steps, the replay), which the
        # cyclic collector would walk again and again (a sixth of the call); cycles that become
        # garbage during the call wait for the first collection after it.
        prepare_process()
        collecting = gc.isenabled()
        gc.disable()
        _recording.depth = getattr(_recording, "depth", 0) + 1
        try:
            return self._record_call(entry, roots, flat)
        finally:
            _recording.depth -= 1
            if collecting:
                gc.enable()

    def _record_call(self, entry: _Entry, roots: list, flat: guard.Flat):
        rec = Recording(self.name)
        traced = [rec.input(leaf) for leaf in flat.leaves]
        call_args = list(roots)   # the arguments' own containers are shared, top-level tuples are not
        for places, t in zip(flat.places, traced):
            for place in places:
                guard.put(call_args, place, t)
        saved = _snapshot(flat.leaves) if self.fallback == "eager" else None
        before = fusion_changes()
        try:
            result = self.fn(*call_args[:-2], **call_args[-2])
            writes = self._restore(call_args, flat, traced)
            moved = self._moved_values(roots, flat)
            if moved:
                raise rec.refuse(moved)
            outs: list[Traced] = []
            shape = template(result, outs, flat.containers)
        except NotReplayable as error:
            rec.close()
            if self.fallback == "error":
                self._restore(call_args, flat, traced)
                raise
            _undo(call_args, flat, saved)
            return self._refused(entry, error, tuple(roots[:-2]), roots[-2])
        except BaseException:
            self._restore(call_args, flat, traced)
            rec.close()
            raise
        rec.close()
        real = fill(shape, [t.recorded_value for t in outs], roots)
        entry.settling += 1
        if fusion_changes() == before:
            entry.replay = Replay(rec, [t.slot for t in outs] + [slot for _, slot in writes], _planned)
            entry.writes, entry.template, entry.n_outputs = writes, shape, len(outs)
            entry.write_plan = guard.write_plan([places for places, _ in writes])
            self._count_recording(flat.key, entry)
        elif entry.settling >= MAX_SETTLING_CALLS:
            entry.eager = True
            warnings.warn(f"mf.compile({self.name}) runs eagerly for these arguments: elementwise fusion "
                          f"was still deciding what to compile after {entry.settling} recordings",
                          RuntimeWarning, stacklevel=4)
        return real

    def _restore(self, call_args: list, flat: guard.Flat, traced: list) -> list:
        """Put the real arrays back where the stand-ins were; returns the positions the function
        rebound to another array, as ``(places, slot)`` (the arrays there are the real results)."""
        writes = []
        for places, t in zip(flat.places, traced):
            moved = []
            for place in places:
                now = guard.get(call_args, place)
                if now is t:
                    guard.put(call_args, place, t.recorded_value)
                elif isinstance(now, Traced):
                    guard.put(call_args, place, now.recorded_value)
                    moved.append((place, now.slot))
            by_slot: dict = {}
            for place, slot in moved:
                by_slot.setdefault(slot, []).append(place)
            writes.extend((tuple(p), s) for s, p in by_slot.items())
        return writes

    def _moved_values(self, roots: list, flat: guard.Flat) -> str | None:
        """Why the call's changes to its arguments could not be replayed, or None."""
        after = guard.flatten(roots)
        for place, old in flat.values.items():
            new = after.values.get(place, _MISSING)
            if new is not old and not _same_value(new, old):
                return (f"changes {guard.where(place, roots)} from {old!r} to {new!r}: a value that "
                        "changes on every call must be an array (a 0-d array) to be replayable")
        for place, value in after.values.items():
            if isinstance(value, np.generic) and any(place in places for places in flat.places):
                return (f"rebinds {guard.where(place, roots)} from an array to a numpy scalar (numpy's "
                        "arithmetic on 0-d arrays returns scalars), which the next call would key by "
                        "its value; update the array in place instead (`x += v`, `x[...] = x + v`)")
        if len(after.key[0]) != len(flat.key[0]) or any(
                a[0] != b[0] for a, b in zip(after.key[0], flat.key[0])):
            return ("changes the structure of its arguments or of a free variable it reads (adds to, "
                    "removes from or replaces a container, such as a list in a global or a closure)")
        return None

    def _count_recording(self, key, entry: _Entry) -> None:
        self.recordings += 1
        log.debug("mf.compile(%s): recorded %d operations", self.name, entry.replay.n_steps)
        if self.recordings > self.warn_after and self._last_key is not None:
            warnings.warn(
                f"mf.compile({self.name}) has recorded {self.recordings} times (each new guard key "
                f"records again): {guard.difference(self._last_key, key)}. Pass values that change "
                "from call to call as arrays, and keep array shapes fixed.", RuntimeWarning, stacklevel=4)
        self._last_key = key


_MISSING = object()
_RELEASE_AFTER_BYTES = 2**24


def _planned(plan) -> None:
    """A replay's buffers now hold what its calls' freed arrays held: give that memory back to the
    system (1-20 ms, once) when there is enough of it."""
    if plan.nbytes >= _RELEASE_AFTER_BYTES:
        release_freed_memory()


def _same_value(a, b) -> bool:
    if isinstance(a, (float, complex, np.generic)):
        return type(a) is type(b) and np.asarray(a).tobytes() == np.asarray(b).tobytes()
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _snapshot(leaves: list) -> list:
    return [leaf.bit_generator.state if isinstance(leaf, np.random.Generator) else leaf.copy()
            for leaf in leaves]


def _undo(call_args: list, flat: guard.Flat, saved: list) -> None:
    """Leave everything a refused recording touched as it was: each array back in every place it
    sat, with its old contents, each generator's state, and every other value."""
    for leaf, old in zip(flat.leaves, saved):
        if isinstance(leaf, np.random.Generator):
            leaf.bit_generator.state = old
        elif leaf.flags.writeable:
            leaf[...] = old
    restore = [(place, leaf) for places, leaf in zip(flat.places, flat.leaves) for place in places]
    for place, value in restore + list(flat.values.items()):
        try:
            guard.put(call_args, place, value)
        except (AttributeError, KeyError, IndexError, TypeError):
            pass   # in a container the function replaced: the place is no longer there


def compile(fn: Callable | None = None, *, check: bool | None = None, fallback: str = "error",
            max_entries: int = 8, warn_after: int = 4):
    """Compile ``fn``, a function of trees of arrays, into a recorded and replayed schedule.

    ``check=True`` (or ``MINFLUX_COMPILE_CHECK=1`` for a whole run) runs the eager function on a
    copy of the arguments beside every replay and raises `ReplayMismatch` unless every result and
    every argument afterwards is the same to the bit. ``fallback="eager"`` runs a function that is
    not replayable eagerly (with one warning) instead of raising `NotReplayable`. At most
    ``max_entries`` guard keys are kept; recording more than ``warn_after`` times warns.

    >>> import minflux as mf, numpy as np
    >>> def read(x):
    ...     return x * 2 if float(x.sum()) > 0 else x
    >>> mf.compile(read)(np.ones(2))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    minflux.schedule.recorder.NotReplayable: mf.compile(read): ... reads an array's value on the host (float) ...
    """
    if fn is None:
        return lambda f: CompiledStep(f, check, fallback, max_entries, warn_after)
    return CompiledStep(fn, check, fallback, max_entries, warn_after)
