"""A recording: the array operations one call of a function performed, in order, as replayable steps.

While `minflux.compile` records, the arrays the function receives are `Traced` stand-ins. Every numpy
operation on them (a ufunc, a numpy function, an array method, indexing) runs at once on the real
arrays and appends one step: the callable, its arguments with each traced array replaced by a `Ref`
to its slot, and where its results go. Anything that would let the data steer Python -- ``bool``,
``float``, ``int``, ``.item()``, ``np.asarray`` -- raises `NotReplayable`, naming the line, because
a replay could not follow a decision made on the values of the recording call.

>>> import numpy as np
>>> rec = Recording("double")
>>> x = rec.input(np.arange(3.0))
>>> y = x * 2.0
>>> [step.fn.__name__ for step in rec.steps], y.shape
(['multiply'], (3,))
"""
from __future__ import annotations

import contextvars
import os
import sys
import weakref
from typing import Any, Callable, NamedTuple

import numpy as np

from .traced import _NUMBERS, Traced, TracedGenerator, follow_conversions

_STATE_IN_CONTEXT = int(np.__version__.split(".")[0]) >= 2
"""Whether numpy keeps its error state in context variables (numpy 2) rather than per thread."""
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NUMPY = os.path.dirname(os.path.abspath(np.__file__))


class NotReplayable(RuntimeError):
    """A function being recorded by `minflux.compile` did something a replay could not repeat.

    >>> import minflux as mf
    >>> issubclass(mf.NotReplayable, RuntimeError)
    True
    """


class Ref(NamedTuple):
    """A step's argument or result that is the array in slot ``slot`` of the recording."""

    slot: int


class Declared(NamedTuple):
    """What an operation declares of the arrays it gets, for the buffers of a replay (`buffers`):
    ``results`` is ``"new"``, ``"views"`` or ``"out"``; ``views_of`` the positions and the names of
    the parameters a ``"views"`` operation may return (or views of), None for all of them.

    >>> Declared("views", ((1,), ("b",))).views_of
    ((1,), ('b',))
    """

    results: str
    views_of: tuple | None = None


class Step(NamedTuple):
    """One recorded operation: ``out = fn(*args, **kwargs)`` under numpy error state ``errstate``.

    ``args`` and ``kwargs`` hold `Ref` in place of traced arrays (inside lists, tuples and dicts too);
    ``out`` mirrors the result the same way, with None where it holds no array; ``declared`` is what
    the operation ``fn`` declared of its arrays (`Declared`), None when it declared nothing; ``kinds``,
    for an operation from outside minflux (that gives no native commands), the types, shapes and
    dtypes of its result (`kinds_of`), which a replay checks its results against.
    """

    fn: Callable
    args: tuple
    kwargs: dict
    out: Any
    errstate: tuple
    declared: Declared | None = None
    kinds: tuple | None = None


def kinds_of(x):
    """The type of ``x`` with an array's shape and dtype, through lists, tuples and dicts.

    >>> kinds_of((np.ones(2, np.float32), np.float64(1.0), None))
    ((<class 'numpy.ndarray'>, (2,), dtype('float32')), (<class 'numpy.float64'>,), (<class 'NoneType'>,))
    """
    cls = x.__class__
    if cls is np.ndarray:
        return cls, x.shape, x.dtype
    if cls is list or cls is tuple:
        return tuple(kinds_of(item) for item in x)
    if cls is dict:
        return tuple((key, kinds_of(value)) for key, value in x.items())
    return (cls,)


def user_line() -> str:
    """``"file.py:12 (source)"`` for the innermost frame outside minflux and numpy."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith((_PACKAGE, _NUMPY)) and not path.startswith("<frozen"):
            break
        frame = frame.f_back
    if frame is None:
        return "an unknown line"
    import linecache

    source = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
    where = f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}"
    return f"{where} (`{source}`)" if source else where


class Recording:
    """The steps, slots and constants of one recording (see the module docstring).

    >>> import numpy as np
    >>> rec = Recording("f")
    >>> x = rec.input(np.ones(2))
    >>> rec.close(); x + 1
    Traceback (most recent call last):
    ...
    minflux.schedule.recorder.NotReplayable: an array recorded by mf.compile(f) was used after its recording ended (kept in a global, a closure or an attribute?); use the arrays the compiled function returns
    """

    def __init__(self, name: str):
        self.name = name
        self.steps: list[Step] = []
        self.slots = 0
        self.n_inputs = 0
        self.closed = False
        self.layouts: dict[int, tuple] = {}   # slot -> (shape, dtype) of a C-contiguous numpy array of fixed shape
        self._by_id: dict[int, weakref.ref] = {}   # id(real array) -> its Traced, while both live
        self._error_state = (None, ())              # (the context or np.geterr() read last, its items)
        follow_conversions(True)
        self._unfollow = weakref.finalize(self, follow_conversions, False)   # at close, or if never closed

    # -- slots --------------------------------------------------------------------------------
    def input(self, value) -> "Traced":
        """A traced stand-in for an argument of the recorded call (a new slot, before any step)."""
        if self.steps or self.n_inputs != self.slots:
            raise RuntimeError("internal error: recording inputs come before every step")
        self.n_inputs += 1
        if isinstance(value, np.random.Generator):
            t = TracedGenerator(value, self.slots, self)
            self.slots += 1
            return t
        return self._new(value)

    def _new(self, value) -> "Traced":
        t = Traced(value, self.slots, self)
        if value.__class__ is np.ndarray and value.size and value.flags.c_contiguous:
            self.layouts[self.slots] = (value.shape, value.dtype)
        self.slots += 1
        if value.__class__ not in _NUMBERS:
            self._by_id[id(value)] = weakref.ref(t)
        return t

    def close(self) -> None:
        """End the recording: its traced arrays refuse every further use."""
        self._unfollow()
        self.closed = True
        self._by_id.clear()

    def check_open(self) -> None:
        if self.closed:
            raise NotReplayable(
                f"an array recorded by mf.compile({self.name}) was used after its recording ended (kept "
                "in a global, a closure or an attribute?); use the arrays the compiled function returns")

    # -- steps --------------------------------------------------------------------------------
    def call(self, fn: Callable, args: tuple, kwargs: dict, scalars: bool = False,
             declared: Declared | None = None, replayed: Callable | None = None,
             replayed_declared: Declared | None = None):
        """Run ``fn`` on the real arrays behind ``args``/``kwargs`` and record it as one step.

        ``scalars`` lets ``fn`` give Python numbers (a generator's scalar draw, Python arithmetic on
        one), which become stand-ins too. An `operation` passes what it declared of ``fn``
        (``declared``), and ``replayed``, which may give a callable to record in ``fn``'s place, with
        what it declares of that one (``replayed_declared``).
        """
        self.check_open()
        found: list = []
        raw_args, ref_args = self._unwrap(args, found)
        raw_kwargs, ref_kwargs = self._unwrap(kwargs, found) if kwargs else ({}, {})
        result = fn(*raw_args, **raw_kwargs)
        wrapped, out = self.adopt(result, fn, scalars)
        if replayed is not None:
            instead = replayed(*raw_args, **raw_kwargs)
            if instead is not None:
                fn, declared = instead, replayed_declared
        kinds = None
        if declared is not None and not (getattr(fn, "__module__", None) or "").startswith("minflux.") \
                and getattr(fn, "native_command", None) is None:
            kinds = kinds_of(result)   # what a replay of someone else's operation must give again
        self.steps.append(Step(fn, ref_args, ref_kwargs, out, self._errstate(), declared, kinds))
        return wrapped

    def _errstate(self) -> tuple:
        """numpy's error state now, as sorted items; the same tuple while it stays the same.

        numpy 2 stores the state in context variables (as its documentation says), so while the
        context equals the last step's -- a pointer compare until anything sets a context variable --
        the state is the one read then; numpy 1 keeps it per thread, and it is read at every step.
        """
        if _STATE_IN_CONTEXT:
            context = contextvars.copy_context()
            try:
                if context == self._error_state[0]:
                    return self._error_state[1]
            except Exception:   # a context variable holding a value that does not compare (an array)
                pass
            self._error_state = (context, tuple(sorted(np.geterr().items())))
            return self._error_state[1]
        now = np.geterr()
        if now != self._error_state[0]:
            self._error_state = (now, tuple(sorted(now.items())))
        return self._error_state[1]

    def _unwrap(self, x, found: list):
        """(the real values, the same structure with `Ref`s) for a step's arguments."""
        cls = x.__class__
        if cls is Traced or cls is TracedGenerator:
            if x._recording is not self:
                if x._recording.closed:
                    x._recording.check_open()
                raise NotReplayable(f"mf.compile({self.name}) got an array traced by another recording")
            found.append(x)
            return x._value, Ref(x._slot)
        if cls is tuple or cls is list:
            raw, refs = [], []
            for item in x:
                if item.__class__ in _WALKED:
                    value, ref = self._unwrap(item, found)
                else:
                    value = ref = item
                raw.append(value)
                refs.append(ref)
            return (tuple(raw), tuple(refs)) if cls is tuple else (raw, refs)
        if cls is dict:
            pairs = {k: self._unwrap(v, found) for k, v in x.items()}
            return {k: p[0] for k, p in pairs.items()}, {k: p[1] for k, p in pairs.items()}
        if cls is slice and any(type(v) is Traced for v in (x.start, x.stop, x.step)):
            raise self.refuse("uses an array's value as a slice bound")
        return x, x

    def adopt(self, result, fn: Callable | None = None, scalars: bool = False):
        """(the result with each real array wrapped, the same structure with `Ref`s and None)."""
        if isinstance(result, (np.ndarray, np.generic)):
            ref = self._by_id.get(id(result))
            known = ref() if ref is not None else None
            if known is not None and known._value is result:
                return known, Ref(known._slot)
            t = self._new(result)
            return t, Ref(t._slot)
        if scalars and result.__class__ in _NUMBERS:
            t = self._new(result)
            return t, Ref(t._slot)
        if result.__class__ in (tuple, list):
            pairs = [self.adopt(r, fn, scalars) for r in result]
            return result.__class__(p[0] for p in pairs), result.__class__(p[1] for p in pairs)
        if result is None or isinstance(result, (np.dtype, type)):
            return result, None
        name = getattr(fn, "__name__", repr(fn))
        raise self.refuse(f"gets a {type(result).__name__} from {name} (a value computed from the data "
                          "that Python would then act on)")

    def refuse(self, what: str) -> NotReplayable:
        """The error for something a replay could not repeat, naming the user's line."""
        return NotReplayable(
            f"mf.compile({self.name}): {user_line()} {what} while the function is being recorded, so "
            "a replay could not follow the data of later calls. Keep the decision inside an operation "
            "(mf.where, an elementwise function with an `if`, or a function decorated with "
            "@mf.operation), pass values that change as array arguments, or use "
            f"mf.compile({self.name}, fallback='eager') to run this function eagerly.")


_WALKED = frozenset({Traced, TracedGenerator, tuple, list, dict, slice})
"""The classes `Recording._unwrap` looks into; everything else is a constant of the step."""
