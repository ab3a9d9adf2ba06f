"""Operations: functions of arrays that a recording keeps as one step, decisions on the data included.

A replay repeats the recorded calls, so a Python decision made on the values of the recording call
(``if x.any():``, a row count read from a mask) would be frozen into it. Inside an operation such a
decision is made again on every call: a recording sees the operation's call, never its insides,
and its body runs on the real arrays. Compiled kernels, the matrix product and the tape's
data-dependent shortcuts are operations. An operation must return arrays (or lists and tuples of
arrays, or None) and must not write into arrays it did not receive or make.

>>> import numpy as np, minflux as mf
>>> @mf.operation
... def clip_rows(x, limit):
...     norms = np.sqrt((x * x).sum(axis=1, keepdims=True))
...     return x if (norms <= limit).all() else x * np.minimum(1.0, limit / norms)
>>> clip_rows(np.array([[3.0, 4.0]]), 1.0)
array([[0.6, 0.8]])
>>> step = mf.compile(lambda x: clip_rows(x, 1.0))
>>> step(np.array([[0.3, 0.4]])), step(np.array([[6.0, 8.0]]))
(array([[0.3, 0.4]]), array([[0.6, 0.8]]))
"""
from __future__ import annotations

import functools
import inspect
import weakref
from typing import Callable

from .recorder import Declared
from .traced import Traced

__all__ = ["declared", "operation", "recording_of"]

_DECLARED: "weakref.WeakKeyDictionary[Callable, Declared]" = weakref.WeakKeyDictionary()
"""Operation (the wrapper `operation` returns) -> what it declared of its arrays."""


def recording_of(x):
    """The `Recording` an argument structure's traced arrays belong to, or None outside a recording.

    >>> import numpy as np
    >>> recording_of([np.ones(2), {"a": 1.0}]) is None
    True
    """
    cls = x.__class__
    if cls is Traced:
        return x._recording
    if cls is tuple or cls is list:
        for item in x:
            kind = item.__class__   # only a traced array or a container is looked into
            if kind is Traced:
                return item._recording
            if kind is tuple or kind is list or kind is dict:
                found = recording_of(item)
                if found is not None:
                    return found
    elif cls is dict:
        return recording_of(list(x.values()))
    return None


def declared(op: Callable) -> Declared | None:
    """What operation ``op`` declared of the arrays it gets (see `operation`), or None.

    >>> import numpy as np
    >>> declared(operation(np.negative, results="new")), declared(operation(np.negative))
    (Declared(results='new', views_of=None), None)
    """
    try:
        return _DECLARED.get(op)
    except TypeError:   # not a function an operation could be
        return None


def operation(fn: Callable | None = None, *, replayed: Callable | None = None, results: str | None = None,
              views_of: tuple = (), replayed_results: str | None = None) -> Callable:
    """``fn`` as one step of a recorded schedule (see the module docstring); unchanged otherwise.

    ``replayed(*args, **kwargs)``, when given, is asked once while recording (after ``fn`` ran on
    the recording call's real arrays) for a callable to replay in ``fn``'s place: one that has
    made ``fn``'s decisions for arrays laid out like these. It must give what ``fn`` gives for any
    arguments, checking what it assumed; None keeps ``fn``.

    ``results`` lets a replay reuse the memory of the arrays ``fn`` sees (`schedule.buffers`):
    ``"new"`` if it returns new arrays (or nothing) and keeps no array it got, ``"views"`` if it may
    return its arguments or views of them and keeps none, ``"out"`` if it returns new arrays and
    writes them into ``out=`` when given (an array, or a list with None for an output left new).
    Undeclared, its arrays get memory of their own on every call. ``views_of`` names the parameters
    a ``"views"`` operation may return (or views of), when not all of them. ``replayed_results``
    declares the results of the callable ``replayed`` gives as ``results`` does ``fn``'s (by default
    the same). The declaration is kept with the operation (`declared`); ``fn`` itself is left as it is.

    The types, shapes and dtypes of ``fn``'s results must follow from its arguments' and constants, as
    numpy's do, never from the values in them: a replay plans what follows on them, and checks them
    for an operation from outside minflux, raising `NotReplayable` where they differ.

    >>> import numpy as np
    >>> operation(np.negative)(np.ones(1))
    array([-1.])
    """
    for given in (results, replayed_results):
        if given not in (None, "new", "views", "out"):
            raise ValueError(f"operation: results must be 'new', 'views' or 'out', got {given!r}")
    if fn is None:
        return lambda f: operation(f, replayed=replayed, results=results, views_of=views_of,
                                   replayed_results=replayed_results)
    viewed = None
    if views_of:
        names = list(inspect.signature(fn).parameters)
        unknown = [n for n in views_of if n not in names]
        if unknown:
            raise ValueError(f"operation: views_of names {unknown}, which {fn.__name__} does not take")
        viewed = (tuple(names.index(n) for n in views_of), tuple(views_of))
    own = Declared(results, viewed) if results is not None else declared(fn)   # an operation's, kept
    instead = Declared(replayed_results, viewed) if replayed_results is not None else own

    @functools.wraps(fn)
    def run(*args, **kwargs):
        recording = recording_of(args) or (recording_of(kwargs) if kwargs else None)
        if recording is None:
            return fn(*args, **kwargs)
        return recording.call(fn, args, kwargs, declared=own, replayed=replayed, replayed_declared=instead)

    run.__wrapped_operation__ = fn
    if own is not None:
        _DECLARED[run] = own
    return run
