"""Scalar functions broadcast over arrays on the tape: `elementwise`, `scalar_rule`, `broadcast`.

The compiler (`minflux.compiler`) turns a scalar function into kernels that return its outputs and,
for the arguments being differentiated, their per-element partials; this module unwraps Tensors,
asks for the partials of exactly the arguments tracked on the active tape, and records ONE tape
node per call (mixed mode). ``mode="reverse"`` instead runs the function op by op on Tensors.
"""
from __future__ import annotations

import functools
from typing import Callable

from ..autograd import active_tape
from ..compiler import ScalarRule, compiled, prepare
from ..tensor import Tensor, unwrap
from .launch import launch
from .node import broadcast_outputs
from .primitives import apply_primitive
from .reverse import run_reverse

__all__ = ["ElementwiseFunction", "ScalarRuleFunction", "broadcast", "elementwise", "scalar_rule"]

_MODES = ("auto", "mixed", "adjoint", "reverse")


class ElementwiseFunction:
    """A scalar function compiled to fused broadcast kernels; call it on arrays, Tensors or numbers.

    >>> import minflux as mf, numpy as np
    >>> @mf.elementwise
    ... def soft_sign(x):
    ...     if x >= 0:
    ...         return x / (1 + x)
    ...     return x / (1 - x)
    >>> soft_sign(np.array([-1.0, 0.0, 3.0]))
    array([-0.5 ,  0.  ,  0.75])
    >>> mf.gradient(lambda x: mf.sum(soft_sign(x)), np.array([-1.0, 1.0]))[0]
    array([0.25, 0.25])
    """

    def __init__(self, fn: Callable):
        if isinstance(fn, ElementwiseFunction):
            fn = fn.fn
        self.fn = fn
        self.__scalar_function__ = fn   # other scalar functions inline calls to it
        functools.update_wrapper(self, fn)

    def __call__(self, *args, mode: str = "auto"):
        return broadcast(self.fn, *args, mode=mode)

    def __deepcopy__(self, memo):
        """Itself, as for a Python function: what it computes is its function's, not data of its own.

        >>> import copy
        >>> f = elementwise(lambda x: x + 1.0)
        >>> copy.deepcopy(f) is f
        True
        """
        return self

    def guard_children(self) -> list:
        """What `mf.compile`'s guard keys of this function: the scalar function, whose free
        variables decide its values (the compiled kernels kept here are caches of it).

        >>> [name for name, _ in elementwise(lambda x: x + 1.0).guard_children()]
        ['fn']
        """
        return [("fn", self.fn)]

    def __repr__(self):
        return f"<elementwise {self.fn.__qualname__}>"


def elementwise(fn: Callable) -> ElementwiseFunction:
    """Decorate a scalar function so that calling it broadcasts a fused kernel over its arguments.

    The function may use ``if``/``elif``/``else``, early ``return``, ``while`` and ``for k in
    range(n)`` on the values of its arguments; inside `mf.gradient` each call is one tape node whose
    per-element partials the kernel computes in forward mode. See `minflux.compiler.frontend` for
    the scalar language.

    >>> import minflux as mf, numpy as np
    >>> @mf.elementwise
    ... def axpy(a, x, y):
    ...     return a * x + y
    >>> axpy(2.0, np.ones(2), np.ones(2))
    array([3., 3.])
    """
    return ElementwiseFunction(fn)


class ScalarRuleFunction:
    """A scalar function with user-given partial derivatives: a new primitive of the derivative table.

    Calls inside elementwise functions use the function's own body for the value and the given rules
    for the partials; calls on arrays and Tensors broadcast it like ``mf.tanh``: its primal kernel,
    then the rules evaluated on the arrays, recorded as one tape node.
    """

    def __init__(self, fn: Callable, partials: tuple):
        self.fn = fn
        self.__scalar_rule__ = ScalarRule(fn, partials, launch)
        functools.update_wrapper(self, fn)

    @property
    def op(self) -> str:
        """The derivative-table name of this primitive."""
        return self.__scalar_rule__.op

    def __call__(self, *args):
        return apply_primitive(self.__scalar_rule__.op, *args)

    def __deepcopy__(self, memo):
        """Itself, as for a Python function (`ElementwiseFunction.__deepcopy__`)."""
        return self

    def guard_children(self) -> list:
        """What `mf.compile`'s guard keys of this function: the scalar function and its derivative
        rules, whose free variables decide its values and partials (the compiled code kept here is a
        cache of them).

        >>> [name for name, _ in scalar_rule(lambda m, x, y: 1.0)(lambda x: x).guard_children()]
        ['fn', 'partials']
        """
        return [("fn", self.fn), ("partials", self.__scalar_rule__.partials)]

    def __repr__(self):
        return f"<scalar_rule {self.fn.__qualname__}>"


def scalar_rule(*partials) -> Callable[[Callable], ScalarRuleFunction]:
    """Give a scalar function its own derivative: one rule ``lambda m, *args, y: ...`` per argument.

    Rules are written like those of the derivative table (operators, numbers and ``m.<primitive>``
    calls; ``y`` is the function's value). Numbers a rule or the function reads from its scope are
    constants of the kernels that use them, compiled again when one changes (an object's attribute
    that a rule reads is read when a kernel is compiled: pass a value that changes as an argument).
    ``None`` or a missing trailing rule makes that argument non-differentiable. A straight-through
    step function whose derivative is a hard sigmoid's slope:

    >>> import minflux as mf, numpy as np
    >>> @mf.scalar_rule(lambda m, x, a, y: m.where(abs(x) < 1 / a, a / 2, 0.0))
    ... def step(x, a):
    ...     return 1.0 if x > 0 else 0.0
    >>> step(np.array([-0.1, 0.3, 2.0]), 1.0)
    array([0., 1., 1.])
    >>> mf.gradient(lambda x: mf.sum(step(x, 1.0)), np.array([-0.1, 0.3, 2.0]))[0]
    array([0.5, 0.5, 0. ])
    """
    for p in partials:
        if p is not None and not callable(p):
            raise TypeError(f"scalar_rule takes derivative rules (callables or None), got {p!r}")

    def decorate(fn):
        return ScalarRuleFunction(fn, partials)

    return decorate


def broadcast(fn: Callable, *args, mode: str = "auto"):
    """Broadcast the scalar function ``fn`` over ``args`` (arrays, Tensors or numbers).

    ``mode="mixed"`` runs one fused kernel that also computes per-element partials for the
    arguments being differentiated with forward-mode duals and records one tape node;
    ``mode="adjoint"`` computes the same partials with an element-local reverse sweep (loop-free
    functions only); ``mode="auto"`` (default) lets the compiler's cost model pick one of the two
    per kernel; ``mode="reverse"`` runs ``fn`` op by op on Tensors (branches as ``where``, loops
    as masked iterations), one tape node per op.
    Returns an array (a tuple of arrays for several outputs), or Tensors inside `mf.gradient`.

    >>> import minflux as mf, numpy as np
    >>> xs = np.array([-4.0, 4.0])
    >>> mf.broadcast(lambda x: x if x < 0 else mf.sqrt(x), xs)
    array([-4.,  2.])
    >>> mf.gradient(lambda x: mf.sum(mf.broadcast(lambda x: x if x < 0 else mf.sqrt(x), x)), xs)[0]
    array([1.  , 0.25])
    """
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(map(repr, _MODES))}, got {mode!r}")
    if isinstance(fn, ScalarRuleFunction):
        return fn(*args)  # a primitive: its compiled value and its own rules, one tape node
    raw = fn.fn if isinstance(fn, ElementwiseFunction) else fn
    if not callable(raw):
        raise TypeError(f"broadcast needs a scalar function, got {type(fn).__name__}")
    cf = compiled(raw)
    if len(args) != cf.n_params:
        raise TypeError(f"{raw.__qualname__} takes {cf.n_params} argument(s), got {len(args)}")
    kinds, float_dtype, arrays, shape = prepare([unwrap(a) for a in args], cf.name)
    if mode == "reverse":
        return run_reverse(cf, args, arrays, kinds, float_dtype, shape)
    tape = active_tape()
    wrt = ()
    if tape is not None:
        wrt = tuple(k for k, a in enumerate(args)
                    if kinds[k] == "f" and isinstance(a, Tensor) and a._tape is tape)
    dual, outs = cf.run(arrays, kinds, float_dtype, wrt, shape, mode, launch)
    n = dual.n_outputs
    outputs = outs[:n]
    if not wrt:
        if any(isinstance(a, Tensor) for a in args):
            outputs = [Tensor(o) for o in outputs]
        return tuple(outputs) if n > 1 else outputs[0]
    partials = dict(dual.constants)
    for (m, k), array in zip(dual.slots, outs[n:]):
        partials[(m, k)] = array
    result = broadcast_outputs(cf.name, args, outputs, partials, fresh=True)
    return tuple(result) if n > 1 else result[0]
