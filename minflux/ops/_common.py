"""Helpers shared by the structural ops: argument values, axis normalisation, shape messages."""
from __future__ import annotations

import numpy as np

from ..backend import is_array
from ..schedule import Traced, operation
from ..tensor import Tensor


@operation(results="new")
def _as_array(x):
    return np.asarray(x)


@operation(results="new")
def check_index_range(ids, size: int, error) -> None:
    """Raise ``error(low, high)`` unless every element of integer array ``ids`` lies in ``[0, size)``.

    >>> check_index_range(np.array([0, 3]), 3, lambda low, high: IndexError(f"{high} is too large"))
    Traceback (most recent call last):
    ...
    IndexError: 3 is too large
    """
    if ids.size:
        low, high = ids.min(), ids.max()
        if low < 0 or high >= size:
            raise error(low, high)


def value_of(x):
    """The array inside a Tensor, an array itself, or a number or nested list as a numpy array.

    Anything else (a string, None, a tuple, a dict) is a `TypeError` saying what was given: numpy would
    turn a string or None into a 0-d array and a tuple of arrays into one stacked array, without a word.

    >>> value_of([1.0, 2.0])
    array([1., 2.])
    >>> value_of("abc")
    Traceback (most recent call last):
    ...
    TypeError: a minflux op got a str ('abc') where it takes an array, a Tensor, a number or a (nested) list of numbers
    """
    if isinstance(x, Tensor):
        return x.value
    if is_array(x):
        return x
    if x.__class__ is Traced:   # a recorded number (a full reduction): its 0-d array, one step
        return _as_array(x)
    if isinstance(x, (str, bytes, tuple, dict, set)) or x is None:
        raise TypeError(f"a minflux op got {describe(x)} where it takes an array, a Tensor, a number or a "
                        f"(nested) list of numbers" + _hint(x))
    return np.asarray(x)


def describe(x) -> str:
    """What ``x`` is, for an error message: ``a str ('abc')``, ``a tuple of 2 items``, ``None``.

    >>> describe((1, 2)), describe(None), describe("abc")
    ('a tuple of 2 items', 'None', "a str ('abc')")
    """
    if x is None:
        return "None"
    if isinstance(x, (tuple, list, dict, set)):
        return f"a {type(x).__name__} of {len(x)} items"
    text = repr(x)
    return f"a {type(x).__name__} ({text if len(text) <= 40 else text[:37] + '...'})"


def _hint(x) -> str:
    if isinstance(x, tuple):
        return ("; a tuple is not one input: join arrays with mf.stack or mf.concatenate, or pass "
                "np.asarray(t) for numbers")
    return ""


def shape_of(x) -> tuple:
    return tuple(getattr(value_of(x), "shape", ()))


def normalise_axes(axis, ndim: int, op: str, shape: tuple) -> tuple[int, ...]:
    """``axis`` (None, an int or a tuple of ints) as a sorted tuple of non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if not -ndim <= a < ndim or (ndim == 0 and a not in (0, -1)):
            raise ValueError(f"{op}: axis {a} is out of range for an array of shape {shape}")
        out.append(a % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def normalise_axis(axis: int, ndim: int, op: str, shape: tuple) -> int:
    """One axis as a non-negative int."""
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    return normalise_axes(axis, ndim, op, shape)[0]


def keepdims_shape(shape: tuple, axes: tuple[int, ...]) -> tuple:
    """``shape`` with the reduced ``axes`` set to 1 (the shape of a keepdims reduction)."""
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def constant_result(value, args):
    """The result of an op with no gradient: an untracked Tensor when an argument is a Tensor."""
    for a in args:
        if isinstance(a, Tensor):
            return Tensor(value)
    return value
