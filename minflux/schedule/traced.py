"""Traced: the stand-in for an array while `minflux.compile` records a call.

It behaves as the numpy array it wraps for everything that does not look at the data: shape, dtype,
strides, operators, ufuncs, numpy functions, methods and indexing all run on the real array at once
and are recorded as steps (numpy hands them over through ``__array_ufunc__`` and
``__array_function__``; ``np.ascontiguousarray``, which numpy does not hand over, is followed while a
recording is open). What would read the data into Python -- ``bool``, ``float``, ``int``,
``.item()``, ``np.asarray``, ``str`` and ``repr``, a kernel that is not an `operation` -- raises
`NotReplayable`, and so does an operation whose result's size depends on the data (``np.nonzero``,
``np.unique``, a traced boolean mask as an index): a replay could not give later calls' sizes. It is
not an ``ndarray`` subclass on purpose: numpy and compiled code could read a subclass's memory
without asking, and the recording would silently miss it.

A number a generator argument draws (``rng.normal()``) is a Python number, as it is eagerly; its
stand-in computes with Python's arithmetic, so its promotion with arrays (weak, as Python numbers
are) is the eager one.

>>> import numpy as np
>>> from minflux.schedule.recorder import Recording
>>> x = Recording("f").input(np.array([1.0, -2.0]))
>>> y = np.maximum(x, 0.0).sum()
>>> y.shape, y.dtype
((), dtype('float64'))
>>> bool(y > 0)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
minflux.schedule.recorder.NotReplayable: mf.compile(f): ... reads an array's value on the host (bool) ...
"""
from __future__ import annotations

import operator
import threading

import numpy as np

_STATIC_FUNCTIONS = frozenset({np.shape, np.ndim, np.size, np.result_type, np.iscomplexobj, np.isrealobj,
                               np.can_cast, np.may_share_memory, np.shares_memory})
_NUMBERS = frozenset({int, float, complex, bool})
"""The classes of the Python numbers a stand-in may hold (a generator's scalar draw, arithmetic on it)."""
_METHOD_CALLERS: dict = {}


def _method_caller(name: str):
    call = _METHOD_CALLERS.get(name)
    if call is None:
        def call(array, *args, **kwargs):
            return getattr(array, name)(*args, **kwargs)
        call.__name__ = call.__qualname__ = f"ndarray.{name}"
        _METHOD_CALLERS[name] = call
    return call


def _argument(position: int, name: str):
    """A test of a call: whether its argument at ``position`` (or keyword ``name``) is traced."""
    def traced(args, kwargs) -> bool:
        value = args[position] if len(args) > position else kwargs.get(name)
        return value.__class__ is Traced
    return traced


def _always(args, kwargs) -> bool:
    return True


_DATA_SIZED = {f: _always for f in (np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.setdiff1d,
                                    np.intersect1d, np.union1d, np.setxor1d, np.trim_zeros)}
_DATA_SIZED.update({getattr(np, name): _always for name in
                    ("unique_all", "unique_counts", "unique_inverse", "unique_values") if hasattr(np, name)})
_DATA_SIZED.update({np.bincount: _argument(0, "x"), np.compress: _argument(0, "condition"),
                    np.extract: _argument(0, "condition"), np.repeat: _argument(1, "repeats"),
                    np.delete: _argument(1, "obj"),
                    np.where: lambda args, kwargs: len(args) + len(kwargs) == 1})
"""numpy functions whose result's size depends on the data, each with the test of a call that makes it
so (``np.where`` with one argument, ``np.repeat`` with traced counts, ...)."""
_DATA_SIZED_METHODS = {"nonzero": _always, "compress": _argument(0, "condition"),
                       "repeat": _argument(0, "repeats")}

_ATTRIBUTES = {name: operator.attrgetter(name) for name in ("T", "mT", "real", "imag")}


class Traced:
    """A recorded array (see the module docstring): `recorded_value` is the real array of the
    recording call (or the Python number a generator drew), `slot` its place in the recording.

    >>> from minflux.schedule.recorder import Recording
    >>> x = Recording("f").input(np.zeros(2))
    >>> x.slot, x.recorded_value
    (0, array([0., 0.]))
    """

    __slots__ = ("_value", "_slot", "_recording", "__weakref__")
    __array_priority__ = 2000
    __hash__ = None

    def __init__(self, value, slot: int, recording):
        self._value, self._slot, self._recording = value, slot, recording

    @property
    def recorded_value(self):
        """The real array (or number) this stands for in the recording call (read-only)."""
        return self._value

    @property
    def slot(self) -> int:
        """Its place in the recording: what a step's `Ref` and a replay's inputs and outputs name
        (read-only)."""
        return self._slot

    # -- numpy's protocols ----------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        for a in inputs:
            if getattr(type(a), "__array_ufunc__", 0) is None:
                return NotImplemented  # a Tensor: its reflected operator takes over
        out = kwargs.get("out")
        if out is not None:
            for o in (out if isinstance(out, tuple) else (out,)):
                if o is not None and type(o) is not Traced:
                    raise self._recording.refuse(
                        f"writes the result of {ufunc.__name__} into an array the recording does not "
                        "follow (one made by np.zeros/np.empty inside the function: make it with "
                        "xp.zeros_like or inside an operation)")
        fn = ufunc if method == "__call__" else getattr(ufunc, method)
        return self._recording.call(fn, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if func in _STATIC_FUNCTIONS:
            return func(*self._recording._unwrap(args, [])[0], **self._recording._unwrap(kwargs, [])[0])
        sized = _DATA_SIZED.get(func)
        if sized is not None and sized(args, kwargs):
            raise self._data_sized(f"np.{func.__name__}")
        return self._recording.call(func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        raise self._recording.refuse("converts an array to numpy (np.asarray, np.array, or code that "
                                     "reads its memory)")

    def __buffer__(self, flags):
        raise self._recording.refuse("reads an array's memory (memoryview or a buffer)")

    def _data_sized(self, call: str):
        return self._recording.refuse(
            f"calls {call}, whose result's size depends on the data (a replay could not give another "
            "call's size; select with a fixed-size form such as np.where(mask, x, 0) or a mask "
            "multiplied in)")

    # -- what reads the data into Python ------------------------------------------------------
    def _host_read(self, how: str):
        raise self._recording.refuse(f"reads an array's value on the host ({how})")

    def __bool__(self):
        self._host_read("bool")

    def __float__(self):
        self._host_read("float")

    def __int__(self):
        self._host_read("int")

    def __index__(self):
        self._host_read("as an index")

    def __complex__(self):
        self._host_read("complex")

    def item(self, *args):
        self._host_read(".item()")

    def tolist(self):
        self._host_read(".tolist()")

    def tobytes(self, order="C"):
        self._host_read(".tobytes()")

    def __round__(self, ndigits=None):
        if isinstance(self._value, np.ndarray):
            raise self._recording.refuse("calls round() on an array, which numpy arrays do not have; "
                                         "np.round(x) rounds it, and a replay repeats that")
        args = (self,) if ndigits is None else (self, ndigits)
        return self._recording.call(round, args, {}, scalars=True)   # a number: Python's round, as eagerly

    def _as_text(self, how: str):
        raise self._recording.refuse(
            f"formats a recorded array as text ({how}): the text would be the recording call's "
            "values on every replay; return the array and format it after the call")

    def __repr__(self):
        self._as_text("repr")

    def __str__(self):
        self._as_text("str or print")

    def __format__(self, spec):
        self._as_text("format or an f-string")

    # -- metadata: fixed by the shapes and dtypes of the arguments ----------------------------
    shape = property(lambda self: self._value.shape)
    dtype = property(lambda self: self._value.dtype)
    ndim = property(lambda self: self._value.ndim)
    size = property(lambda self: self._value.size)
    itemsize = property(lambda self: self._value.itemsize)
    nbytes = property(lambda self: self._value.nbytes)
    strides = property(lambda self: self._value.strides)
    flags = property(lambda self: self._value.flags)

    @property
    def base(self):
        """The traced array this one is a view of (None when it owns its memory, as in numpy)."""
        base = getattr(self._value, "base", None)
        if base is None:
            return None
        ref = self._recording._by_id.get(id(base))
        known = ref() if ref is not None else None
        return known if known is not None else _UNTRACED_BASE

    def __len__(self):
        return len(self._value)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __getattr__(self, name):
        if name.startswith("__") or not hasattr(self._value, name):
            raise AttributeError(f"a recorded array has no attribute {name!r}")
        if not callable(getattr(self._value, name)):
            raise self._recording.refuse(f"reads .{name} of an array (its memory or a view of its data)")
        call = _method_caller(name)
        sized = _DATA_SIZED_METHODS.get(name)

        def method(*args, **kwargs):
            if sized is not None and sized(args, kwargs):
                raise self._data_sized(f".{name}()")
            return self._recording.call(call, (self,) + args, kwargs)
        return method

    # -- indexing -----------------------------------------------------------------------------
    def __getitem__(self, index):
        if _traced_mask(index):
            raise self._recording.refuse(
                "indexes with a recorded boolean mask (one the function computed, or an argument or a "
                "global array), so the result's size depends on the data (select with "
                "np.where(mask, x, 0) or multiply by the mask; a mask made inside the function from "
                "constants is fine)")
        return self._recording.call(operator.getitem, (self, index), {})

    def __setitem__(self, index, value):
        self._recording.call(operator.setitem, (self, index, value), {})


def _traced_mask(index) -> bool:
    items = index if index.__class__ is tuple else (index,)
    return any(i.__class__ is Traced and getattr(i._value, "dtype", None) == np.bool_ for i in items)


class _UntracedBase:
    """The ``base`` of a view whose owner the recording never saw (numpy made it internally)."""

    def __repr__(self):
        return "<untraced base>"


_UNTRACED_BASE = _UntracedBase()


def _attribute(name: str):
    getter = _ATTRIBUTES[name]
    return property(lambda self: self._recording.call(getter, (self,), {}))


for _name in _ATTRIBUTES:
    setattr(Traced, _name, _attribute(_name))


def _operators_as_eagerly(value) -> bool:
    """Whether the recording calls Python's operator on ``value``, as eager code does, not numpy's
    ufunc: a drawn Python number, or a numpy integer or boolean scalar, whose arithmetic checks
    overflow (warns or raises under numpy's error state) where a ufunc's wraps silently. A numpy
    float scalar's ufunc gives its operator's bits and warnings, only named without "scalar" ("divide
    by zero encountered in divide"), and keeps the loss's arithmetic native."""
    return value.__class__ in _NUMBERS or isinstance(value, np.generic) and value.dtype.kind in "biu"


def _binary(ufunc, python, reflected: bool = False, inplace: bool = False):
    def method(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented
        if _operators_as_eagerly(self._value):
            return self._recording.call(python, (other, self) if reflected else (self, other), {},
                                        scalars=True)
        if inplace and not isinstance(self._value, np.generic):   # a numpy scalar is immutable: rebound
            return ufunc(self, other, out=(self,))
        return ufunc(other, self) if reflected else ufunc(self, other)
    return method


def _unary(ufunc, python):
    def method(self):
        if _operators_as_eagerly(self._value):
            return self._recording.call(python, (self,), {}, scalars=True)
        return ufunc(self)
    return method


_ARITHMETIC = (("add", np.add, operator.add), ("sub", np.subtract, operator.sub),
               ("mul", np.multiply, operator.mul), ("truediv", np.true_divide, operator.truediv),
               ("floordiv", np.floor_divide, operator.floordiv), ("mod", np.remainder, operator.mod),
               ("pow", np.power, operator.pow), ("matmul", np.matmul, operator.matmul),
               ("and", np.bitwise_and, operator.and_), ("or", np.bitwise_or, operator.or_),
               ("xor", np.bitwise_xor, operator.xor), ("lshift", np.left_shift, operator.lshift),
               ("rshift", np.right_shift, operator.rshift))
for _n, _ufunc, _python in _ARITHMETIC:
    setattr(Traced, f"__{_n}__", _binary(_ufunc, _python))
    setattr(Traced, f"__r{_n}__", _binary(_ufunc, _python, reflected=True))
    setattr(Traced, f"__i{_n}__", _binary(_ufunc, _python, inplace=True))
for _n, _ufunc, _python in (("lt", np.less, operator.lt), ("le", np.less_equal, operator.le),
                            ("gt", np.greater, operator.gt), ("ge", np.greater_equal, operator.ge),
                            ("eq", np.equal, operator.eq), ("ne", np.not_equal, operator.ne)):
    setattr(Traced, f"__{_n}__", _binary(_ufunc, _python))
for _n, _ufunc, _python in (("neg", np.negative, operator.neg), ("pos", np.positive, operator.pos),
                            ("abs", np.absolute, operator.abs), ("invert", np.invert, operator.invert)):
    setattr(Traced, f"__{_n}__", _unary(_ufunc, _python))
Traced.__divmod__ = _binary(np.divmod, divmod)


class TracedGenerator(Traced):
    """The stand-in for a ``numpy.random.Generator`` argument: every draw is a recorded step, so a
    replay draws from the generator it is given exactly what the function would have drawn (a
    scalar draw, such as ``rng.normal()``, is a Python number as eagerly)."""

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("_") or not callable(getattr(self._value, name, None)):
            raise AttributeError(f"a recorded generator has no method {name!r}")
        call = _method_caller(name)
        return lambda *args, **kwargs: self._recording.call(call, (self,) + args, kwargs, scalars=True)

    def __repr__(self):
        return repr(self._value)   # the generator object itself, as eagerly: nothing of its state

    __str__ = __repr__
    __format__ = object.__format__


_CONTIGUOUS = np.ascontiguousarray
_open_recordings = [0]
_lock = threading.Lock()


def _ascontiguousarray(a, dtype=None, *, like=None):
    """``np.ascontiguousarray`` while a recording is open: on a traced array, a recorded step."""
    if a.__class__ is Traced:
        return a._recording.call(_CONTIGUOUS, (a,), {} if dtype is None else {"dtype": dtype})
    return _CONTIGUOUS(a, dtype=dtype, like=like)


def follow_conversions(opened: bool) -> None:
    """A recording opened (True) or closed (False): ``np.ascontiguousarray``, which numpy does not
    hand over to ``__array_function__``, follows traced arrays while any recording is open.

    >>> from minflux.schedule.recorder import Recording
    >>> rec = Recording("f")
    >>> y = np.ascontiguousarray(rec.input(np.ones((2, 3))).T)
    >>> rec.close(); y.shape, rec.steps[-1].fn is _CONTIGUOUS
    ((3, 2), True)
    """
    with _lock:
        _open_recordings[0] += 1 if opened else -1
        if _open_recordings[0] > 0 and np.ascontiguousarray is _CONTIGUOUS:
            np.ascontiguousarray = _ascontiguousarray
        elif _open_recordings[0] <= 0 and np.ascontiguousarray is _ascontiguousarray:
            np.ascontiguousarray = _CONTIGUOUS
