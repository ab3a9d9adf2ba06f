"""The reverse-mode tape: explicit gradients in the style of Flux (`gradient`, `withgradient`).

A tape exists only while `gradient` runs. Each op whose inputs are tracked on the active tape appends
one node (input slots, output slots, a VJP closure over plain arrays) and returns tracked Tensors.
Nodes are appended in execution order, so walking the list backwards is a topological order.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Sequence

import numpy as np

from .backend import get_array_module, is_array
from .tensor import Tensor
from .tree import map_arrays

_local = threading.local()


class Tape:
    """The record of one gradient computation: a list of nodes and a slot counter."""

    __slots__ = ("nodes", "slots", "__weakref__")

    def __init__(self):
        self.nodes: list[Node] = []
        self.slots = 0

    def new_slot(self) -> int:
        self.slots += 1
        return self.slots


class Node:
    """One recorded op: which slots it read, which it wrote, and its vector-Jacobian product."""

    __slots__ = ("name", "inputs", "outputs", "vjp", "multi")

    def __init__(self, name, inputs, outputs, vjp, multi):
        self.name, self.inputs, self.outputs, self.vjp, self.multi = name, inputs, outputs, vjp, multi


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def active_tape() -> Tape | None:
    """The tape that records ops right now, or None (outside `gradient`, or inside `no_grad`)."""
    stack = _stack()
    return stack[-1] if stack else None


@contextlib.contextmanager
def _recording(tape: Tape | None):
    stack = _stack()
    stack.append(tape)
    try:
        yield
    finally:
        stack.pop()


def no_grad():
    """A context in which nothing is recorded: results are untracked Tensors or arrays.

    >>> import minflux as mf, numpy as np
    >>> def f(x):
    ...     with mf.no_grad():
    ...         c = x * 2            # treated as a constant
    ...     return mf.sum(c * x)
    >>> mf.gradient(f, np.ones(2))[0]
    array([2., 2.])
    """
    return _recording(None)


def stop_gradient(x):
    """The value of ``x`` as a constant: no gradient flows through it.

    >>> import minflux as mf, numpy as np
    >>> mf.gradient(lambda x: mf.sum(x * mf.stop_gradient(x)), np.array([3.0]))[0]
    array([3.])
    """
    return Tensor(x.value) if isinstance(x, Tensor) else x


def tracked_mask(args: Sequence[Any], tape: Tape | None = None) -> tuple[bool, ...]:
    """For each argument, whether it is a Tensor tracked on the active tape."""
    tape = active_tape() if tape is None else tape
    if tape is None:
        return (False,) * len(args)
    return tuple(isinstance(a, Tensor) and a._tape is tape for a in args)


def _untracked(value, args):
    if any(isinstance(a, Tensor) for a in args):
        return tuple(Tensor(v) for v in value) if isinstance(value, (list, tuple)) else Tensor(value)
    return value


def record(name: str, value, args: Sequence[Any], vjp: Callable, multi: bool = False):
    """Wrap an op's result and, when any argument is tracked, append its node to the tape.

    ``value`` is the op's output array (a list of arrays when ``multi``). ``vjp(g, needs)`` receives
    the output gradient (a list with None for outputs that got none, when ``multi``) and a tuple of
    booleans saying which arguments need a gradient; it returns one gradient (or None) per argument.
    The closure must capture arrays, never Tensors, so the tape dies with `gradient`'s frame.
    Plain-array arguments with no Tensor among them give a plain array back.
    """
    tape = active_tape()
    if tape is None:
        return _untracked(value, args)
    in_slots = tuple(a._slot if isinstance(a, Tensor) and a._tape is tape else 0 for a in args)
    if not any(in_slots):
        return _untracked(value, args)
    if multi:
        outs = tuple(Tensor(v, tape, tape.new_slot()) for v in value)
        out_slots = tuple(t._slot for t in outs)
    else:
        outs = Tensor(value, tape, tape.new_slot())
        out_slots = (outs._slot,)
    tape.nodes.append(Node(name, in_slots, out_slots, vjp, multi))
    return outs


def _backward(tape: Tape, loss: Tensor) -> dict[int, Any]:
    xp = get_array_module(loss.value)
    grads: dict[int, Any] = {loss._slot: xp.ones_like(loss.value)}
    nodes = tape.nodes
    while nodes:
        node = nodes.pop()
        if node.multi:
            gout = [grads.pop(s, None) for s in node.outputs]
            if all(g is None for g in gout):
                continue
        else:
            gout = grads.pop(node.outputs[0], None)
            if gout is None:
                continue
        needs = tuple(s != 0 for s in node.inputs)
        gins = node.vjp(gout, needs)
        for slot, g in zip(node.inputs, gins):
            if slot == 0 or g is None:
                continue
            prev = grads.get(slot)
            grads[slot] = g if prev is None else prev + g
    return grads


def _is_float(a) -> bool:
    return np.dtype(a.dtype).kind in "fc"


def _split_output(out):
    if isinstance(out, tuple):
        if not out:
            raise ValueError("gradient needs f to return a scalar loss or (loss, aux...); f returned ()")
        return out[0], out
    return out, None


def _plain(tree):
    return map_arrays(lambda a: a.value if isinstance(a, Tensor) else a, tree)


def withgradient(f: Callable, *args):
    """Run ``f(*args)`` and return ``(value, grads)``: its value and one gradient per argument.

    An argument may be an array, a Tensor or a tree (objects with attributes, lists, tuples, dicts) of
    arrays; its gradient has the same structure with None where an array received no gradient.
    Integer and boolean arrays are never differentiated. If ``f`` returns a tuple, its first element is
    the scalar loss and the value comes back as the whole tuple converted to plain arrays.

    >>> import minflux as mf, numpy as np
    >>> value, (g,) = mf.withgradient(lambda x: mf.sum(x * x), np.array([1.0, 2.0]))
    >>> float(value), g
    (5.0, array([2., 4.]))
    """
    tape = Tape()
    memo: dict = {}

    def wrap(leaf):
        value = leaf.value if isinstance(leaf, Tensor) else leaf
        if not _is_float(value):
            return value
        return Tensor(value, tape, tape.new_slot())

    with _recording(tape):
        targs = [map_arrays(wrap, a, trainable_only=True, _memo=memo) for a in args]
        out = f(*targs)
    loss, whole = _split_output(out)
    if not isinstance(loss, Tensor) and not is_array(loss) and not isinstance(loss, (int, float, np.number)):
        raise TypeError(f"gradient needs f to return a scalar loss (or a tuple whose first element is "
                        f"the loss); f returned {type(loss).__name__}")
    loss_value = loss.value if isinstance(loss, Tensor) else loss
    size = getattr(loss_value, "size", 1)
    if size != 1:
        raise ValueError(f"gradient needs f to return a scalar loss; f returned an array of shape "
                         f"{tuple(loss_value.shape)}. Reduce it first, e.g. with mf.sum or mf.mean.")
    if isinstance(loss, Tensor) and loss._tape is tape:
        by_slot = _backward(tape, loss)
    else:
        by_slot = {}

    def grad_of(leaf):
        entry = memo.get(id(leaf))
        wrapped = entry[1] if entry is not None else None
        if isinstance(wrapped, Tensor) and wrapped._tape is tape:
            return by_slot.get(wrapped._slot)
        return None

    grads = tuple(map_arrays(grad_of, a, trainable_only=False) for a in args)
    value = _plain(whole) if whole is not None else loss_value
    return value, grads


def gradient(f: Callable, *args):
    """The gradient of scalar ``f(*args)`` with respect to each argument, as a tuple.

    >>> import minflux as mf, numpy as np
    >>> mf.gradient(lambda x: mf.sum(mf.tanh(x) * x), np.zeros(2))
    (array([0., 0.]),)
    """
    return withgradient(f, *args)[1]
