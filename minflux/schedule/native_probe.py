"""The probe of a replay's native form: one replay whose calls that can be commands hand over their words.

`Probe` stands in for the callables of the statements that may become native commands
(`minflux.schedule.native.probed` routes them through it) during one replay: each call runs as usual,
and where its callable can say what it does as a command of the native runner (`command_of`), that
command is kept with the call's results. A command with a check to redo is kept only where it gives
its numpy call's bits on copies of its operands (`_trial`). A launch that made its results new (no
planned buffer reached it) is made, after its call, for the arrays it returned
(`minflux.schedule.native_results`).
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from ..runtime import native_runner
from .native_loops import loop_command
from .native_numpy import COMMANDS

__all__ = ["Item", "Probe", "command_of"]

def command_of(fn):
    """The function giving a call of ``fn``'s native command, or None: its own, one of `COMMANDS`, or
    for any other ufunc numpy's own loop (`loop_command`).

    >>> command_of(np.add) is COMMANDS[np.add], command_of(np.tanh) is loop_command(np.tanh), command_of(print)
    (True, True, None)
    """
    found = getattr(fn, "native_command", None)
    if found is None:
        try:
            found = COMMANDS.get(fn)
        except TypeError:   # an unhashable callable
            return None
        if found is None and fn.__class__ is np.ufunc:
            found = loop_command(fn)
    return found


class Probe:
    """Stands in for the callables of the statements that may become commands during one replay:
    runs each and keeps ``commands[statement] = (its Command, its result)`` (and ``errstates[statement]``,
    numpy's error state at the call, under which its redo runs); and, for an operation
    with ``steady_results``, ``views[statement]``: the positions among its flattened arguments of the
    arrays its results are views of, or None where one is a new array.

    >>> probe, out = Probe(), np.empty(3)
    >>> probe(7, np.add, np.ones(3), np.ones(3), out=out).tolist(), list(probe.commands)
    ([2.0, 2.0, 2.0], [7])
    """

    def __init__(self):
        self.commands: dict = {}
        self.errstates: dict = {}   # statement -> numpy's error state at its call, for its redo
        self.views: dict = {}
        self.made_of: dict = {}     # statement -> its command, its call's arrays and its results' (`native_groups`)
        self._items: dict = {}      # id of a numpy scalar a command made -> (it, the 0-d array it writes it into)
        self.numbers: dict = {}     # statement -> (positions, keywords) of the arguments its command holds numbers of

    def __call__(self, index: int, fn, /, *args, **kwargs):
        make, command = command_of(fn), None
        errstate = np.geterr()
        given_args, given_kwargs = args, kwargs
        if self._items and make is not None and getattr(fn, "native_command", None) is None:
            args = tuple(_in_items(args, self._items))
            kwargs = dict(zip(kwargs, _in_items(kwargs.values(), self._items)))
        try:
            command = None if make is None else make(args, kwargs, errstate)
            scratch = None if command is None or command.redo is None else _trial(make, command, kwargs, errstate)
        except Exception as error:   # noqa: BLE001 (the call itself runs below, in Python, as always)
            _warn_once(f"minflux could not make a native command of {getattr(fn, '__name__', fn)!r} ({error!r}); "
                       "it stays a Python call; please report it")
            command = None
        result = kept = fn(*given_args, **given_kwargs)
        if command is None and make is not None and _fills_new_results(fn):
            command, scratch, kept = _into_results(make, args, kwargs, result, errstate)
        if command is not None and (command.redo is None or
                                    scratch is not None and scratch.tobytes() == command.redo[1][-1].tobytes()):
            self.commands[index] = (command, kept)
            self.errstates[index] = errstate
            if kept.__class__ is Item:
                self._items[id(result)] = (result, kept.array)
            self.made_of[index] = (command, _arrays((args, tuple(kwargs.values()))), _result_arrays(kept))
            if command.refresh is None:
                self.numbers[index] = ([i for i, a in enumerate(args) if _has_number(a)],
                                       [k for k, v in kwargs.items() if _has_number(v)])
        if getattr(fn, "steady_results", False):
            self.views[index] = _holders(result, _leaves((args, tuple(kwargs.values()))))
        return result


def _into_results(make, args: tuple, kwargs: dict, result, errstate: dict) -> tuple:
    """(the command of a call that made (some of) its results new, made for the arrays it returned as
    its ``out=``: a ufunc's array, or a list with each result it made in place of its None; what the
    command writes on copies of its operands where it has a check to redo; the result as the probe
    keeps it), or (None, None, result). A numpy scalar result (a sum of every element) is kept as an
    `Item`: the command writes it into a 0-d array. The call wrote nothing its operands hold, so they
    are as they were before it."""
    given, kept = kwargs.get("out"), result
    if result.__class__ is np.ndarray and given is None:
        out = result
    elif isinstance(result, np.generic) and given is None and result.dtype.kind in "iuf":   # bools are singletons
        out = np.empty((), result.dtype)
        out[()] = result
        kept = Item(out)
    elif result.__class__ is list and (given is None or given.__class__ is list and len(given) == len(result)):
        out = list(result)
    else:
        return None, None, result
    into = {**kwargs, "out": out}
    try:
        command = make(args, into, errstate)
        return (command, None if command is None or command.redo is None else _trial(make, command, into, errstate),
                kept)
    except Exception as error:   # noqa: BLE001 (its call stays a Python call, as it ran)
        _warn_once(f"minflux could not make a native command of a call into its results ({error!r}); it "
                   "stays a Python call; please report it")
        return None, None, result


class Item(NamedTuple):
    """A call's numpy scalar result, as the 0-d ``array`` its command writes it into. A command that
    reads that scalar (a loss divided by a count) is made to read the array: the scalar is new on every
    call, and taken as a number it would stay the value of the probe's call."""

    array: np.ndarray


def _in_items(values, items: dict) -> list:
    """``values`` with each numpy scalar a command made (a key of ``items``) as the array it lies in."""
    return [items[id(v)][1] if isinstance(v, np.generic) and id(v) in items else v for v in values]


def _fills_new_results(fn) -> bool:
    """Whether ``fn``'s command may be made for the results a call made new: a launch that says so, a
    ufunc of one result, a concatenation, a stack, a sum, a mean, or ones or zeros like an array."""
    return getattr(fn, "fills_new_results", False) or fn.__class__ is np.ufunc and fn.nout == 1 or \
        any(fn is f for f in _FILLING)


_FILLING = (np.concatenate, np.stack, np.sum, np.mean, np.ones_like, np.zeros_like)


def _leaves(x) -> list:
    """``x`` with its lists and tuples flattened, in order."""
    if x.__class__ is list or x.__class__ is tuple:
        return [leaf for item in x for leaf in _leaves(item)]
    return [x]


def _has_number(x) -> bool:
    """Whether ``x`` is or holds a number (a numpy scalar or a Python number) a command would keep as it is."""
    return any(isinstance(leaf, (np.generic, int, float, complex)) for leaf in _leaves(x))


def _arrays(x) -> list:
    return [leaf for leaf in _leaves(x) if leaf.__class__ is np.ndarray]


def _result_arrays(result) -> list:
    """The arrays of a result as the probe keeps it (an `Item`'s array)."""
    return [result.array] if result.__class__ is Item else _arrays(result)


def _holders(result, leaves: list) -> tuple | None:
    """The positions among ``leaves`` of the arrays in whose memory the arrays of ``result`` lie, or
    None where one lies in none of them (a new array)."""
    found = set()
    for r in _arrays(result):
        holding = [i for i, leaf in enumerate(leaves) if leaf.__class__ is np.ndarray and np.may_share_memory(r, leaf)]
        if not holding:
            return None
        found.update(holding)
    return tuple(sorted(found))


_warned: set = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _trial(make, command, kwargs: dict, errstate: dict):
    """What ``command`` (made of a call with keywords ``kwargs``) writes when it runs on copies of its
    operands (laid out as they are, taken before its call), or None where it does not run so."""
    *operands, out = command.redo[1]
    copies = [_copy_in_layout(x) if x.__class__ is np.ndarray else x for x in operands]
    scratch = _copy_in_layout(out)
    if any(c is None for c in copies) or scratch is None:
        return None
    trial = make(tuple(copies), {**kwargs, "out": scratch}, errstate)
    if trial is None or trial.words[0] != command.words[0]:
        return None
    program = np.array([-1, *trial.words], np.int64)
    native_runner.run(program, 1, len(program))
    return scratch if program[0] < 0 else None


def _copy_in_layout(x: np.ndarray) -> np.ndarray | None:
    """A copy of ``x`` with its strides (another routine may read another layout another way)."""
    if any(s < 0 or s % x.itemsize for s in x.strides):
        return None
    span = sum((n - 1) * s for n, s in zip(x.shape, x.strides)) // x.itemsize + 1 if x.size else 0
    copy = np.lib.stride_tricks.as_strided(np.empty(span, x.dtype), x.shape, x.strides)
    np.copyto(copy, x)
    return copy
