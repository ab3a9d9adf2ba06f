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
what to compile (the first call or two), the recording call's results are used and the next call
records again, so a replay computes exactly what the eager function computes from then on.

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
import os
import warnings
from collections import OrderedDict
from typing import Callable

import numpy as np

from .._allocator import release_freed_memory
from ..pointwise.lazy import fusion_changes
from ..schedule import NotReplayable, Recording, Replay, Traced
from . import guard
from .outputs import ReplayMismatch, compare, fill, template

__all__ = ["compile", "CompiledStep", "NotReplayable", "ReplayMismatch"]

log = logging.getLogger(__name__)

_CHECK_ALL = os.environ.get("MINFLUX_COMPILE_CHECK", "").strip() not in ("", "0", "false", "no", "off")
MAX_SETTLING_CALLS = 8
"""Calls recorded while fusion is still deciding, after which the next recording is kept anyway."""


class _Entry:
    """What one guard key has: a replay (once recorded), or the decision to run eagerly."""

    __slots__ = ("replay", "eager", "writes", "template", "n_outputs", "settling")

    def __init__(self):
        self.replay, self.eager, self.writes, self.template, self.n_outputs = None, False, (), None, 0
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
        self.fn, self.check, self.fallback = fn, _CHECK_ALL if check is None else bool(check), fallback
        self.max_entries, self.warn_after = max_entries, warn_after
        self.name = getattr(fn, "__qualname__", getattr(fn, "__name__", "function"))
        self._entries: OrderedDict = OrderedDict()
        self._last_key = None
        self.recordings = self.replays = 0

    def __call__(self, *args):
        flat = guard.flatten(args)
        entry = self._entries.get(flat.key)
        if entry is None:
            entry = self._entries[flat.key] = _Entry()
            if len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(flat.key)
        if entry.eager:
            return self.fn(*args)
        if entry.replay is None:
            return self._record(entry, args, flat)
        self.replays += 1
        if self.check:
            return self._checked(entry, args, flat)
        return self._replay(entry, args, flat)

    @property
    def buffer_bytes(self) -> int:
        """The memory the replays kept now hold for their intermediate arrays (allocated once each)."""
        return sum(e.replay.buffers.nbytes for e in self._entries.values() if e.replay is not None)

    def schedule(self, *args) -> str | None:
        """The generated source of the replay for these arguments, or None if not yet recorded."""
        entry = self._entries.get(guard.flatten(args).key)
        return entry.replay.source if entry is not None and entry.replay is not None else None

    # -- replay -------------------------------------------------------------------------------
    def _replay(self, entry: _Entry, args: tuple, flat: guard.Flat):
        values = entry.replay(flat.leaves)
        outputs = values[:entry.n_outputs]
        for (places, _), value in zip(entry.writes, values[entry.n_outputs:]):
            for place in places:
                guard.put(args, place, value)
        return fill(entry.template, outputs, args)

    def _checked(self, entry: _Entry, args: tuple, flat: guard.Flat):
        twin = copy.deepcopy(args)
        expected = self.fn(*twin)
        got = self._replay(entry, args, flat)
        compare(expected, got, f"mf.compile({self.name}, check=True): the result")
        compare(twin, args, f"mf.compile({self.name}, check=True): the arguments after the call")
        return got

    # -- recording ----------------------------------------------------------------------------
    def _record(self, entry: _Entry, args: tuple, flat: guard.Flat):
        # A recording makes a hundred thousand objects that live on (its steps, the replay), which the
        # cyclic collector would walk again and again (a sixth of the call); cycles that become
        # garbage during the call wait for the first collection after it.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._record_call(entry, args, flat)
        finally:
            if collecting:
                gc.enable()

    def _record_call(self, entry: _Entry, args: tuple, flat: guard.Flat):
        rec = Recording(self.name)
        traced = [rec.input(leaf) for leaf in flat.leaves]
        call_args = list(args)   # the arguments' own containers are shared, top-level tuples are not
        for places, t in zip(flat.places, traced):
            for place in places:
                guard.put(call_args, place, t)
        saved = _snapshot(flat.leaves) if self.fallback == "eager" else None
        before = fusion_changes()
        try:
            result = self.fn(*call_args)
            writes = self._restore(call_args, flat, traced)
            moved = self._moved_values(args, flat)
            if moved:
                raise rec.refuse(moved)
            outs: list[Traced] = []
            shape = template(result, outs, flat.containers)
        except NotReplayable as error:
            self._restore(call_args, flat, traced)
            rec.close()
            if self.fallback == "error":
                raise
            _restore_snapshot(flat.leaves, saved)
            warnings.warn(f"mf.compile({self.name}) runs eagerly for these arguments: {error}",
                          RuntimeWarning, stacklevel=3)
            entry.eager = True
            return self.fn(*args)
        except BaseException:
            self._restore(call_args, flat, traced)
            rec.close()
            raise
        rec.close()
        real = fill(shape, [t._value for t in outs], args)
        settled = fusion_changes() == before
        entry.settling += 1
        if settled or entry.settling >= MAX_SETTLING_CALLS:
            entry.replay = Replay(rec, [t._slot for t in outs] + [slot for _, slot in writes], _planned)
            entry.writes, entry.template, entry.n_outputs = writes, shape, len(outs)
            self._count_recording(flat.key, entry)
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
                    guard.put(call_args, place, t._value)
                elif isinstance(now, Traced):
                    guard.put(call_args, place, now._value)
                    moved.append((place, now._slot))
            by_slot: dict = {}
            for place, slot in moved:
                by_slot.setdefault(slot, []).append(place)
            writes.extend((tuple(p), s) for s, p in by_slot.items())
        return writes

    def _moved_values(self, args: tuple, flat: guard.Flat) -> str | None:
        """Why the call's changes to its arguments could not be replayed, or None."""
        after = guard.flatten(args)
        for place, old in flat.values.items():
            new = after.values.get(place, _MISSING)
            if new is not old and not _same_value(new, old):
                where = ".".join(str(k) for k in place[1:]) or "it"
                return (f"changes argument {place[0]}'s {where} from {old!r} to {new!r}: a value that "
                        "changes on every call must be an array (a 0-d array) to be replayable")
        if len(after.key[0]) != len(flat.key[0]) or any(
                a[0] != b[0] for a, b in zip(after.key[0], flat.key[0])):
            return "changes the structure of its arguments (adds, removes or replaces containers)"
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
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


def _snapshot(leaves: list) -> list:
    return [leaf.bit_generator.state if isinstance(leaf, np.random.Generator) else leaf.copy()
            for leaf in leaves]


def _restore_snapshot(leaves: list, saved: list) -> None:
    for leaf, old in zip(leaves, saved):
        if isinstance(leaf, np.random.Generator):
            leaf.bit_generator.state = old
        else:
            leaf[...] = old


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
