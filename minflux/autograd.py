"""The reverse-mode tape: explicit gradients in the style of Flux (`gradient`, `withgradient`).

A tape exists only while `gradient` runs. Each op whose inputs are tracked on the active tape appends
one node (input slots, output slots, a VJP closure over plain arrays) and returns tracked Tensors.
Nodes are appended in execution order, so walking the list backwards is a topological order.
"""
from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Sequence

import numpy as np

from .backend import get_array_module, is_array
from .indexed_gradient import IndexedGrad
from .product_gradient import ProductGradient
from .runtime.allocator import prepare_process
from .tensor import Tensor
from .tree import map_arrays

_local = threading.local()


class Tape:
    """The record of one gradient computation: a list of nodes, a slot counter, and weak references
    to the deferred Tensors made on it (`defer`; computed before the backward pass).

    >>> tape = Tape()
    >>> tape.new_slot(), tape.new_slot(), len(tape.nodes)
    (1, 2, 0)
    """

    __slots__ = ("nodes", "slots", "deferred", "__weakref__")

    def __init__(self):
        self.nodes: list[Node] = []
        self.slots = 0
        self.deferred: list = []

    def defer(self, tensor: Tensor) -> weakref.ref:
        """Remember deferred ``tensor`` by a weak reference (returned): `compute_deferred` computes
        it before the backward pass if it is still alive and deferred.

        >>> tape, t = Tape(), Tensor(1.0)
        >>> tape.defer(t)() is t, len(tape.deferred)
        (True, 1)
        """
        ref = weakref.ref(tensor)
        self.deferred.append(ref)
        return ref

    def compute_deferred(self) -> None:
        """Compute every deferred Tensor of this tape that is still alive."""
        deferred, self.deferred = self.deferred, []
        for ref in deferred:
            t = ref()
            if t is not None and t.is_deferred:
                t.value

    def new_slot(self) -> int:
        self.slots += 1
        return self.slots


class Node:
    """One recorded op: which slots it read, which it wrote, and its vector-Jacobian product.

    ``inputs`` holds 0 for an argument that is not tracked; ``multi`` marks an op with several outputs.

    >>> Node("neg", (1,), (2,), lambda g, needs: [-g], False).outputs
    (2,)
    """

    __slots__ = ("name", "inputs", "outputs", "vjp", "multi")

    def __init__(self, name, inputs, outputs, vjp, multi):
        self.name, self.inputs, self.outputs, self.vjp, self.multi = name, inputs, outputs, vjp, multi


def _stack() -> list:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def active_tape() -> Tape | None:
    """The tape that records ops right now, or None (outside `gradient`, or inside `no_grad`).

    >>> import minflux as mf, numpy as np
    >>> active_tape() is None
    True
    >>> mf.gradient(lambda x: mf.sum(x) * (active_tape() is not None), np.ones(1))[0]
    array([1.])
    """
    stack = _stack()
    return stack[-1] if stack else None


class recording:
    """A context in which ``tape`` records (None: nothing records), e.g. to compute a deferred value
    on the tape it was made on.

    >>> with recording(None):
    ...     active_tape() is None
    True
    """

    __slots__ = ("tape", "stack")

    def __init__(self, tape: Tape | None):
        self.tape = tape

    def __enter__(self) -> None:
        self.stack = _stack()
        self.stack.append(self.tape)

    def __exit__(self, *exc) -> None:
        self.stack.pop()


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
    return recording(None)


def stop_gradient(x):
    """The value of ``x`` as a constant: no gradient flows through it.

    >>> import minflux as mf, numpy as np
    >>> mf.gradient(lambda x: mf.sum(x * mf.stop_gradient(x)), np.array([3.0]))[0]
    array([3.])
    """
    return Tensor(x.value) if isinstance(x, Tensor) else x


def _untracked(value, args):
    for a in args:
        if isinstance(a, Tensor):
            return tuple(Tensor(v) for v in value) if isinstance(value, (list, tuple)) else Tensor(value)
    return value


def record(name: str, value, args: Sequence[Any], vjp: Callable, multi: bool = False):
    """Wrap an op's result and, when any argument is tracked, append its node to the tape.

    ``value`` is the op's output array (a list of arrays when ``multi``). ``vjp(g, needs)`` receives
    the output gradient (a list with None for outputs that got none, when ``multi``) and a sequence
    whose item ``k`` is truthy when argument ``k`` needs a gradient; it returns one gradient per
    argument: an array of the argument's shape, an `IndexedGrad`, a `ProductGradient`, or None. It
    must not modify ``g``.
    The closure must capture arrays, never Tensors, so the tape dies with `gradient`'s frame.
    Plain-array arguments with no Tensor among them give a plain array back.

    >>> import minflux as mf, numpy as np
    >>> def twice(x):
    ...     return record("twice", 2 * x.value, [x], lambda g, needs: [2 * g])
    >>> mf.gradient(lambda x: mf.sum(twice(x)), np.ones(2))[0]
    array([2., 2.])
    """
    stack = _stack()
    tape = stack[-1] if stack else None
    if tape is None:
        return _untracked(value, args)
    for a in args:
        if a.__class__ is Tensor and a._pending is not None:
            a.value  # a deferred argument gets its slot when it is computed
    in_slots = tuple([a._slot if isinstance(a, Tensor) and a._tape is tape else 0 for a in args])
    if not any(in_slots):
        return _untracked(value, args)
    if multi:
        outs = tuple(Tensor(v, tape, tape.new_slot()) for v in value)
        out_slots = tuple(t._slot for t in outs)
    else:
        tape.slots += 1
        outs = Tensor(value, tape, tape.slots)
        out_slots = (tape.slots,)
    tape.nodes.append(Node(name, in_slots, out_slots, vjp, multi))
    return outs


def bind(tensor: Tensor, result) -> None:
    """Give deferred ``tensor`` the value an op computed for it: ``result`` is what the op returned.
    A Tensor recorded by `record` hands over its value and its output slot (the node's output is
    ``tensor`` from then on); an untracked Tensor or an array hands over its value only.

    >>> import numpy as np
    >>> t = Tensor.deferred(object(), None)     # a pending computation (`Tensor.deferred`) not run yet
    >>> bind(t, np.ones(2)); t.is_deferred, t.value
    (False, array([1., 1.]))
    """
    if isinstance(result, Tensor):
        tensor._value, tensor._slot = result._value, result._slot
    else:
        tensor._value = result
    tensor._pending = None


class _Gradients:
    """The gradients accumulated per slot during one backward pass.

    A buffer this pass allocated itself is "owned" and further contributions are added into it in
    place; an array handed over by a VJP may be shared (with another slot, or with the VJP's inputs),
    so the first contribution to it makes a new owned array instead of writing into it.
    """

    __slots__ = ("by_slot", "owned")

    def __init__(self):
        self.by_slot: dict[int, Any] = {}
        self.owned: set[int] = set()

    def add(self, slot: int, g) -> None:
        by_slot = self.by_slot
        prev = by_slot.get(slot)
        if type(g) is ProductGradient or type(prev) is ProductGradient:
            if prev is None:
                by_slot[slot] = g
                return
            if type(g) is ProductGradient and type(prev) is ProductGradient:
                prev.add(g)
                return
            if type(prev) is ProductGradient:  # a product meets another kind of gradient: form it
                prev = by_slot[slot] = prev.dense()
                self.owned.add(slot)
            else:
                g = g.dense()
        if type(g) is IndexedGrad:
            if prev is None:
                by_slot[slot] = g.dense()
            else:
                if slot not in self.owned:
                    prev = by_slot[slot] = _fresh(prev, g.dtype)
                g.add_into(prev)
            self.owned.add(slot)
        elif prev is None:
            by_slot[slot] = g
        elif slot in self.owned and getattr(prev, "ndim", 0):
            prev += g
        else:  # a 0-d sum is a numpy scalar, so it is stored, not updated in place
            by_slot[slot] = prev + g
            self.owned.add(slot)

    def pop(self, slot: int):
        g = self.by_slot.pop(slot, None)
        return g.dense() if type(g) is ProductGradient else g


def _fresh(array, dtype):
    xp = get_array_module(array)
    return array.astype(xp.result_type(array.dtype, dtype), copy=True)


def is_seed_broadcast(g) -> bool:
    """True when ``g`` is the running backward pass's seed (ones) or a zero-stride view of it.

    Such a gradient is known to be all ones without reading its memory (no device-to-host copy on
    a GPU), so a VJP may skip multiplying by it.

    >>> import numpy as np
    >>> is_seed_broadcast(np.ones(3))
    False
    """
    seed = getattr(_local, "seed", None)
    if seed is None or any(g.strides):
        return False
    seed, g = getattr(seed, "recorded_value", seed), getattr(g, "recorded_value", g)  # recorded: the arrays
    while g is not None:
        if g is seed:
            return True
        g = getattr(g, "base", None)
    return False


def _backward(tape: Tape, loss: Tensor) -> dict[int, Any]:
    value = loss.value
    if value.__class__ is np.ndarray or isinstance(value, np.generic):   # ones_like's wrapper costs more
        seed = np.ones(value.shape, value.dtype)
    else:
        seed = get_array_module(value).ones_like(value)
    grads = _Gradients()
    grads.by_slot[loss._slot] = seed
    outer_seed, _local.seed = getattr(_local, "seed", None), seed
    try:
        _run_nodes(tape.nodes, grads)
    finally:
        _local.seed = outer_seed
    return grads.by_slot


def _run_nodes(nodes: list, grads: _Gradients) -> None:
    with np.errstate(all="ignore"):
        while nodes:
            node = nodes.pop()
            if node.multi:
                gout = [grads.pop(s) for s in node.outputs]
                if all(g is None for g in gout):
                    continue
            else:
                gout = grads.pop(node.outputs[0])
                if gout is None:
                    continue
            inputs = node.inputs
            gins = node.vjp(gout, inputs)
            for slot, g in zip(inputs, gins):
                if slot and g is not None:
                    grads.add(slot, g)


def _own_gradient(g, value, handed_out: set[int]):
    """A leaf's gradient as an array of the leaf's shape and dtype that aliases nothing else returned.

    VJPs may hand back views (of a broadcast seed, of another slot's gradient); the caller may update
    a returned gradient in place, so views and arrays already returned for another leaf are copied.
    """
    if not is_array(g):  # a numpy scalar from a full reduction (full_like: a step of a recording too)
        g = get_array_module(value).full_like(value, g, shape=())
    elif g.dtype != value.dtype:
        g = g.astype(value.dtype, copy=True)
    elif g.base is not None or id(g) in handed_out:
        g = _copy(g)
    if g.shape != value.shape:
        raise RuntimeError(f"internal error: gradient of shape {g.shape} for an argument of shape "
                           f"{value.shape}")
    return g


def _copy(g):
    """A copy of gradient ``g``: a float array's by ``positive`` (a ufunc, so that a recording writes it
    into a buffer it plans and a native replay copies it), any other by ``copy`` (a ufunc makes a 0-d
    array a scalar)."""
    return get_array_module(g).positive(g) if g.dtype.kind == "f" and g.ndim else g.copy()


def _no_gradient(value):
    return None


def _refuse_foreign_array(value):
    """Raise for an array of another framework (torch, JAX, TensorFlow ...) among the arguments."""
    if isinstance(value, np.generic):
        return value
    if hasattr(value, "__dlpack__") or hasattr(value, "__array_interface__") \
            or hasattr(value, "__cuda_array_interface__"):
        kind = f"{type(value).__module__}.{type(value).__qualname__}"
        raise TypeError(f"an argument of mf.gradient holds a {kind}, which minflux cannot "
                        "differentiate (its gradient would silently be None). Convert it first: "
                        "mf.from_dlpack(x) shares its memory as a numpy or CuPy array.")
    return value


def _untracked_loss_message(loss, any_tracked: bool) -> str:
    kind = type(loss)
    what = (f"an untracked {kind.__name__}" if isinstance(loss, Tensor) or is_array(loss)
            else f"a Python {kind.__name__}" if kind in (int, float, bool) else
            f"a value of type {kind.__module__}.{kind.__name__}")
    if not any_tracked:
        return (f"mf.gradient has nothing to differentiate: no argument holds a float array or Tensor "
                f"(integer and boolean arrays are never differentiated; numbers, numpy scalars such as "
                f"np.float64(1.0) included, are configuration: pass np.asarray(x) to differentiate "
                f"one), and f returned {what}.")
    return (f"the loss f returned ({what}) does not depend on the arguments being differentiated, so "
            "every gradient would be None. It was computed without minflux ops on them: with numpy "
            "functions, float()/.item(), under mf.no_grad or mf.stop_gradient, only through "
            "comparisons and conditions (which carry no derivative), or not from them at all.")


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
    arrays; its gradient has the same structure with None where an array received no gradient and in
    place of everything that is not an array (numbers, strings, functions: configuration). An array
    that reaches the loss only through zero derivatives (``x * 0``, ``floor(x)``) gets zeros, in
    every AD mode and whether or not its expression was fused; None means no differentiable use.
    Integer and boolean arrays are never differentiated (their gradient is None). If ``f`` returns a
    tuple, its first element is the scalar loss and the value comes back as the whole tuple with
    Tensors converted to plain arrays. Returned gradients are fresh arrays, safe to update in place.

    As in PyTorch and JAX, numpy's floating-point warnings (overflow, division by zero, invalid) are
    off while ``f`` and its backward pass run; an inf or nan loss is returned, not warned about.

    >>> import minflux as mf, numpy as np
    >>> value, (g,) = mf.withgradient(lambda x: mf.sum(x * x), np.array([1.0, 2.0]))
    >>> float(value), g
    (5.0, array([2., 4.]))
    """
    if active_tape() is not None:
        raise NotImplementedError(
            "mf.gradient was called while another mf.gradient is computing: higher-order derivatives "
            "(a gradient of a gradient) are not supported yet. Compute the inner gradient outside the "
            "outer one, or inside `with mf.no_grad():` if its result is a constant for the outer one.")
    prepare_process()
    tape = Tape()
    wrapped_leaves: dict[int, tuple] = {}  # id(leaf) -> (leaf, its Tensor): the leaf pins the id

    def wrap(leaf):
        value = leaf.value if isinstance(leaf, Tensor) else leaf
        if not _is_float(value):
            return value
        tracked = Tensor(value, tape, tape.new_slot())
        wrapped_leaves[id(leaf)] = (leaf, tracked)
        return tracked

    with np.errstate(all="ignore"), recording(tape):
        # one walk: tied arrays map once, and arrays of other frameworks are refused
        targs = map_arrays(wrap, tuple(args), trainable_only=True, static=_refuse_foreign_array)
        out = f(*targs)
        tape.compute_deferred()
    loss, whole = _split_output(out)
    if not isinstance(loss, Tensor) and not is_array(loss) and not isinstance(loss, (int, float, np.number)):
        raise TypeError(f"gradient needs f to return a scalar loss (or a tuple whose first element is "
                        f"the loss); f returned {type(loss).__name__}")
    loss_value = loss.value if isinstance(loss, Tensor) else loss
    size = getattr(loss_value, "size", 1)
    if size != 1:
        raise ValueError(f"gradient needs f to return a scalar loss; f returned an array of shape "
                         f"{tuple(loss_value.shape)}. Reduce it first, e.g. with mf.sum or mf.mean.")
    if not (isinstance(loss, Tensor) and loss._tape is tape):
        raise ValueError(_untracked_loss_message(loss, bool(wrapped_leaves)))
    by_slot = _backward(tape, loss)
    handed_out: set[int] = set()

    def grad_of(leaf):
        entry = wrapped_leaves.get(id(leaf))
        if entry is None:
            return None
        wrapped = entry[1]
        g = by_slot.get(wrapped._slot)
        if g is None:
            return None
        if type(g) is ProductGradient:
            g = by_slot[wrapped._slot] = g.dense()
        g = _own_gradient(g, wrapped.value, handed_out)
        handed_out.add(id(g))
        return g

    grads = tuple(map_arrays(grad_of, a, trainable_only=False, static=_no_gradient) for a in args)
    value = _plain(whole) if whole is not None else loss_value
    return value, grads


def gradient(f: Callable, *args):
    """The gradient of scalar ``f(*args)`` with respect to each argument, as a tuple.

    >>> import minflux as mf, numpy as np
    >>> mf.gradient(lambda x: mf.sum(mf.tanh(x) * x), np.zeros(2))
    (array([0., 0.]),)
    """
    return withgradient(f, *args)[1]
