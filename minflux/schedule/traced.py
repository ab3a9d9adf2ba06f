"""Traced: the stand-in for an array while `minflux.compile` records a call.

It behaves as the numpy array it wraps for everything that does not look at the data: shape, dtype,
strides, operators, ufuncs, numpy functions, methods and indexing all run on the real array at once
and are recorded as steps (numpy hands them over through ``__array_ufunc__`` and
``__array_function__``). What would read the data into Python -- ``bool``, ``float``, ``int``,
``.item()``, ``np.asarray``, a kernel that is not an `operation` -- raises `NotReplayable`. It is
not an ``ndarray`` subclass on purpose: numpy and compiled code could read a subclass's memory
without asking, and the recording would silently miss it.

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

import numpy as np

_DYNAMIC_FUNCTIONS = frozenset({np.nonzero, np.flatnonzero, np.argwhere, np.unique, np.extract, np.compress})
_STATIC_FUNCTIONS = frozenset({np.shape, np.ndim, np.size, np.result_type, np.iscomplexobj, np.isrealobj,
                               np.can_cast, np.may_share_memory, np.shares_memory})
_METHOD_CALLERS: dict = {}


def _method_caller(name: str):
    call = _METHOD_CALLERS.get(name)
    if call is None:
        def call(array, *args, **kwargs):
            return getattr(array, name)(*args, **kwargs)
        call.__name__ = call.__qualname__ = f"ndarray.{name}"
        _METHOD_CALLERS[name] = call
    return call


_ATTRIBUTES = {name: operator.attrgetter(name) for name in ("T", "mT", "real", "imag")}


class Traced:
    """A recorded array (see the module docstring). ``_value`` is the real array of the recording
    call, ``_slot`` its place in the recording; ``_dynamic`` marks a shape that depends on the data."""

    __slots__ = ("_value", "_slot", "_recording", "_dynamic", "__weakref__")
    __array_priority__ = 2000
    __hash__ = None

    def __init__(self, value, slot: int, recording, dynamic: bool = False):
        self._value, self._slot, self._recording, self._dynamic = value, slot, recording, dynamic

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
        return self._recording.call(func, args, kwargs, dynamic=func in _DYNAMIC_FUNCTIONS)

    def __array__(self, dtype=None, copy=None):
        raise self._recording.refuse("converts an array to numpy (np.asarray, np.array, or code that "
                                     "reads its memory)")

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

    def __format__(self, spec):
        self._host_read("format")

    def __repr__(self):
        return f"Traced(shape={self._value.shape}, dtype={self._value.dtype}, slot={self._slot})"

    __str__ = __repr__

    # -- metadata: fixed by the shapes and dtypes of the arguments ----------------------------
    @property
    def shape(self) -> tuple:
        if self._dynamic:
            raise self._recording.refuse("reads the shape of an array whose size depends on the data "
                                         "(from nonzero, unique or a boolean mask)")
        return self._value.shape

    dtype = property(lambda self: self._value.dtype)
    ndim = property(lambda self: self._value.ndim)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    itemsize = property(lambda self: self._value.itemsize)
    nbytes = property(lambda self: self.size * self._value.itemsize)
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
        shape = self.shape
        if not shape:
            raise TypeError("len() of unsized object")
        return shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __getattr__(self, name):
        if name.startswith("__") or not hasattr(self._value, name):
            raise AttributeError(f"a recorded array has no attribute {name!r}")
        if not callable(getattr(self._value, name)):
            raise self._recording.refuse(f"reads .{name} of an array (its memory or a view of its data)")
        call = _method_caller(name)
        return lambda *args, **kwargs: self._recording.call(call, (self,) + args, kwargs,
                                                            dynamic=name == "nonzero")

    # -- indexing -----------------------------------------------------------------------------
    def __getitem__(self, index):
        dynamic = _is_mask(index)
        return self._recording.call(operator.getitem, (self, index), {}, dynamic=dynamic)

    def __setitem__(self, index, value):
        self._recording.call(operator.setitem, (self, index, value), {})


def _is_mask(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(getattr(getattr(i, "dtype", None), "kind", None) == "b" for i in items)


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


def _binary(ufunc, reflected: bool = False, inplace: bool = False):
    def method(self, other):
        if getattr(type(other), "__array_ufunc__", 0) is None:
            return NotImplemented
        if inplace:
            return ufunc(self, other, out=(self,))
        return ufunc(other, self) if reflected else ufunc(self, other)
    return method


for _names, _ufunc in ((("add",), np.add), (("sub",), np.subtract), (("mul",), np.multiply),
                       (("truediv",), np.true_divide), (("floordiv",), np.floor_divide),
                       (("mod",), np.remainder), (("pow",), np.power), (("matmul",), np.matmul),
                       (("and",), np.bitwise_and), (("or",), np.bitwise_or), (("xor",), np.bitwise_xor),
                       (("lshift",), np.left_shift), (("rshift",), np.right_shift)):
    for _n in _names:
        setattr(Traced, f"__{_n}__", _binary(_ufunc))
        setattr(Traced, f"__r{_n}__", _binary(_ufunc, reflected=True))
        setattr(Traced, f"__i{_n}__", _binary(_ufunc, inplace=True))
for _n, _ufunc in (("lt", np.less), ("le", np.less_equal), ("gt", np.greater), ("ge", np.greater_equal),
                   ("eq", np.equal), ("ne", np.not_equal)):
    setattr(Traced, f"__{_n}__", _binary(_ufunc))
for _n, _ufunc in (("neg", np.negative), ("pos", np.positive), ("abs", np.absolute), ("invert", np.invert)):
    setattr(Traced, f"__{_n}__", lambda self, _u=_ufunc: _u(self))
Traced.__divmod__ = _binary(np.divmod)


class TracedGenerator(Traced):
    """The stand-in for a ``numpy.random.Generator`` argument: every draw is a recorded step, so a
    replay draws from the generator it is given exactly what the function would have drawn."""

    __slots__ = ()

    def __getattr__(self, name):
        if name.startswith("_") or not callable(getattr(self._value, name, None)):
            raise AttributeError(f"a recorded generator has no method {name!r}")
        call = _method_caller(name)
        return lambda *args, **kwargs: self._recording.call(call, (self,) + args, kwargs)

    def __repr__(self):
        return f"TracedGenerator(slot={self._slot})"
