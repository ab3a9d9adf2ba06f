"""Deferred elementwise values: ordinary array expressions fuse into one mixed-mode kernel by themselves.

Inside `mf.gradient`, an elementwise op (an operator, ``mf.<primitive>``, ``mf.where``, a comparison,
a `scalar_rule` function) with an argument tracked on the tape does not run: it returns a deferred
Tensor that knows its shape and dtype at once (a shape error still points at the line that caused
it) and holds the pending expression. The first consumer that needs the contents -- a structural op,
a conversion, printing, ``bool()``, the end of the `gradient` call -- computes the whole pending
expression DAG as ONE scalar function, which the compiler builds from expressions
(`minflux.compiler.expressions`): one pass over memory gives the value and the partials with
respect to the differentiable leaves, recorded as one tape node. Subexpressions
shared inside one DAG are computed once; a deferred value that is never used costs nothing.

Compiling a new structure takes a second or more, so an expression is evaluated op by op (one tape
node per op, as without fusion) until its structure -- primitives, constants, leaf kinds and dtypes,
which leaves are differentiated -- has been seen ``compile_after`` times (default 2; the kernel is
then also on disk for later processes). A training loop is fused from its second step on. A pending
expression is computed early when it would exceed ``max_nodes`` primitives or ``max_leaves`` leaves,
which keeps every kernel's compile time bounded; results under ``min_elements`` (4096) elements run at
once, since on tiny arrays a launch costs more than the passes it saves. ``MINFLUX_FUSION=0`` (or `set_fusion`) turns fusion
off; `fusion_stats` says what was deferred, fused and compiled.

>>> import minflux as mf, numpy as np
>>> x, y, z = np.ones(4096), np.full(4096, 2.0), np.zeros(4096)
>>> loss = lambda x, y, z: mf.sum(x * y + mf.tanh(z) * 0.375)
>>> _ = mf.fusion_stats(reset=True)
>>> for step in range(2):     # step 0 runs op by op, step 1 compiles the structure and fuses it
...     grads = mf.gradient(loss, x, y, z)
>>> stats = mf.fusion_stats()
>>> stats["op_by_op"], stats["fused_launches"], stats["fused_ops"]
(4, 1, 4)
>>> [g[:2] for g in grads]
[array([2., 2.]), array([1., 1.]), array([0.375, 0.375])]
"""
from __future__ import annotations

import contextlib
import functools
from collections import Counter

import numpy as np

from ..autograd import bind, recording
from ..backend import is_cupy_array
from ..compiler import FLOAT_DTYPES, TABLE, Expression, FunctionBuilder, argument, result_kind, rule_of
from ..runtime import settings
from ..tensor import Tensor
from .eager import apply_primitive_now
from .launch import launch
from .node import broadcast_node

__all__ = ["fusion", "fusion_stats", "set_fusion"]

_settings = {
    "compile_after": 2,
    "max_nodes": 48,
    "max_leaves": 12,
    "min_elements": 4096,
}
_stats: Counter = Counter()
_seen: Counter = Counter()
_SEEN_LIMIT = 4096
_changes = [0]   # sightings that ran op by op for want of a kernel: a later sighting fuses instead


def set_fusion(enabled: bool | None = None, compile_after: int | None = None,
               max_nodes: int | None = None, max_leaves: int | None = None,
               min_elements: int | None = None) -> dict:
    """Change how elementwise expressions fuse; returns the previous settings (pass them back as
    ``set_fusion(**old)`` to restore).

    ``enabled`` turns deferral on or off (``MINFLUX_FUSION=0`` starts with it off); a structure is
    compiled once it has been seen ``compile_after`` times (1: at once); pending expressions are
    computed before they grow past ``max_nodes`` primitives or ``max_leaves`` leaves; results of fewer
    than ``min_elements`` elements run at once (on tiny arrays a fused launch costs more than the
    passes over memory it saves).

    >>> import minflux as mf
    >>> old = mf.set_fusion(enabled=False); mf.set_fusion(**old)["enabled"]
    False
    """
    old = {"enabled": settings.get("fusion"), **_settings}
    for name, value in (("compile_after", compile_after), ("max_nodes", max_nodes),
                        ("max_leaves", max_leaves), ("min_elements", min_elements)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"set_fusion: {name} must be a positive int, got {value!r}")
    if enabled is not None:
        settings.set("fusion", bool(enabled))
    for name, value in (("compile_after", compile_after), ("max_nodes", max_nodes),
                        ("max_leaves", max_leaves), ("min_elements", min_elements)):
        if value is not None:
            _settings[name] = value
    return old


@contextlib.contextmanager
def fusion(**settings):
    """`set_fusion` for the duration of a block. A training step that must be computed the same way
    whatever the process has compiled before (an exactly resumable run) fuses at once:

    >>> import minflux as mf, numpy as np
    >>> with mf.fusion(compile_after=1):
    ...     mf.gradient(lambda x: mf.sum(x * 0.625 + 1.0), np.ones(4096))[0][:2]
    array([0.625, 0.625])
    """
    old = set_fusion(**settings)
    try:
        yield
    finally:
        set_fusion(**old)


def fusion_stats(reset: bool = False) -> dict:
    """Counts since the start (or the last reset): ``deferred`` ops, pending expressions ``computed``,
    ``fused_launches`` (one kernel each) and the ``fused_ops`` they covered, ops evaluated
    ``op_by_op`` (structures not yet compiled), ``kernels_built`` (new fused structures compiled) and
    ``early`` computations forced by the size caps.

    >>> import minflux as mf
    >>> sorted(mf.fusion_stats())[:3]
    ['computed', 'deferred', 'early']
    """
    keys = ("computed", "deferred", "early", "fused_launches", "fused_ops", "kernels_built", "op_by_op")
    out = {k: _stats[k] for k in keys}
    if reset:
        _stats.clear()
    return out


def fusion_changes() -> int:
    """How many times fusion ran a structure op by op that it will compile when it sees it again:
    while this grows, the same code may fuse differently on its next call (`minflux.compile` keeps
    a recording once a call leaves it unchanged).

    >>> fusion_changes() >= 0
    True
    """
    return _changes[0]


class Pending:
    """One deferred primitive: its table row, its arguments (Tensors, arrays or numbers), their
    ``terms`` (`_term`: each array or Tensor an argument of the compiler's, classified once, when the
    op was deferred; None for the ``inputs``, the deferred arguments by position); what the result
    will be (shape, dtype, kind); the tape it records on, the Tensor it belongs to, and ``floats``,
    the one float type its whole DAG computes in (None if none)."""

    __slots__ = ("row", "args", "terms", "inputs", "shape", "dtype", "kind", "tape", "owner", "members",
                 "leaf_ids", "device", "floats")

    def compute(self, tensor: Tensor) -> None:
        _compute(tensor, self)


def _term(a, tape):
    """The term of an argument that is not deferred: the number itself for a number (a constant of
    the function), an argument for an array or a Tensor (differentiated when it is a float tracked
    on ``tape``); None when a kernel cannot take it (the op runs now)."""
    if isinstance(a, Tensor):
        value = a.value
        dtype = getattr(value, "dtype", None)
        if dtype is None:
            return None
        wrt = a._tape is tape and dtype.kind == "f"
    elif isinstance(a, (bool, int, np.bool_, np.integer)) or \
            (isinstance(a, float) and not hasattr(a, "shape")):
        return a
    elif getattr(a, "dtype", None) is None:
        return None
    else:
        value, wrt = a, False
    try:
        term = argument(value, wrt, source=a)
    except TypeError:
        return None
    return None if term.kind == "f" and term.dtype not in FLOAT_DTYPES else term


def _number_kind(a) -> str:
    return "b" if isinstance(a, (bool, np.bool_)) else "i" if isinstance(a, (int, np.integer)) else "f"


_KERNEL_DTYPES = {"f": FLOAT_DTYPES, "i": (np.dtype(np.int64),), "b": (np.dtype(bool),)}


@functools.lru_cache(maxsize=1024)
def _result(name: str, kinds: tuple, probes: tuple, shapes: tuple):
    """(kind, dtype, compute float dtype, shape) of primitive ``name`` over arguments of ``kinds``,
    probes ``probes`` and ``shapes``; None when a kernel cannot give numpy's dtype. A probe is what
    decides numpy's result type: ``("a", dtype string)`` for an array, ``("s", type)`` for a number
    (Python numbers are weak in numpy's promotion, numpy scalars are not).

    The dtype is the one op-by-op evaluation gives: numpy's rule for table primitives (found by
    running the primitive on empty arrays), the elementwise compiler's rule for scalar rules. The
    compute float dtype is the float type the op computes in (its float result's, or for a
    comparison the promoted type of its operands), None when it computes in no float type.
    """
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ValueError(f"mf.{name}: cannot broadcast shapes {' and '.join(map(str, shapes))}") from None
    kind = result_kind(name, list(kinds))
    values = [np.empty(0, np.dtype(p[1])) if p[0] == "a" else p[1](1) for p in probes]
    if rule_of(TABLE[name]) is not None:  # a rule's primal kernel: the float arrays' promoted type
        floats = [v.dtype for v, k in zip(values, kinds) if k == "f" and isinstance(v, np.ndarray)]
        dtype = np.dtype(np.result_type(*floats)) if floats else np.dtype(np.float64)
        dtype = dtype if kind == "f" else _KERNEL_DTYPES[kind][0]
    else:
        try:
            with np.errstate(all="ignore"):
                dtype = np.dtype(TABLE[name].impl(np, *values).dtype)
        except Exception:     # numpy refuses these types: the op runs now and says so
            return None
    if dtype not in _KERNEL_DTYPES[kind]:
        return None           # int8, float16, ...: only op-by-op evaluation gives numpy's dtype
    if dtype.kind == "f":
        compute = dtype
    else:
        promoted = np.result_type(*values)
        compute = promoted if promoted.kind == "f" else None
    return kind, dtype, compute, shape


@functools.lru_cache(maxsize=1024)
def _broadcast_size(shapes: tuple) -> int:
    """The number of elements of ``shapes`` broadcast together, 0 when they do not broadcast."""
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        return 0
    n = 1
    for d in shape:
        n *= d
    return n


def defer(name: str, args: tuple, tape) -> Tensor | None:
    """A deferred Tensor for primitive ``name`` over ``args``, or None when it must run now (no
    argument tracked on ``tape`` or deferred, an argument a kernel cannot take, or fusion off)."""
    if not settings.get("fusion"):
        return None
    row = TABLE.get(name)
    if row is None:
        return None
    if _broadcast_size(tuple([getattr(a, "shape", ()) for a in args])) < _settings["min_elements"]:
        return None  # a tiny result (or shapes that do not broadcast: the op now says so) runs now
    kinds, probes, shapes, terms, inputs, floats_of = [], [], [], [], [], []
    members, leaf_ids = set(), set()   # the DAG's distinct pending nodes and leaves, for the caps
    involved = tracked = False
    where = None
    for k, (a, rule) in enumerate(zip(args, row.partials)):
        pending = a.pending if isinstance(a, Tensor) else None
        if pending is not None:
            if pending.__class__ is not Pending or pending.tape is not tape:
                return None   # another tape's (or another kind of) pending value: the op runs now
            kind, dtype, term = pending.kind, pending.dtype, None
            inputs.append((k, a))
            floats_of.append(pending.floats)
        else:
            term = _term(a, tape)
            if term is None:
                return None
            kind, dtype = (term.kind, term.dtype) if term.__class__ is Expression else (_number_kind(a), None)
        terms.append(term)
        kinds.append(kind)
        probes.append(("a", dtype.str) if dtype is not None else ("s", type(a)))
        shapes.append(a.shape if dtype is not None else ())
        if pending is not None:
            involved = True
            members |= pending.members
            leaf_ids |= pending.leaf_ids
            device = pending.device
        elif dtype is not None:
            leaf_ids.add(id(a))
            device = "gpu" if is_cupy_array(term.value) else "cpu"
        else:
            continue
        if isinstance(a, Tensor) and a._tape is tape:
            involved = True
            tracked = tracked or rule is not None
        if where is None:
            where = device
        elif device != where:
            return None  # the op runs now and reports the mix of devices itself
    if not involved:
        return None
    if len(members) >= _settings["max_nodes"] or len(leaf_ids) > _settings["max_leaves"]:
        for _, a in inputs:
            _stats["early"] += 1
            a.value
        return defer(name, args, tape)
    result = _result(name, tuple(kinds), tuple(probes), tuple(shapes))
    if result is None:
        return None
    kind, dtype, compute, shape = result
    floats = compute if compute is not None else next((f for f in floats_of if f is not None), None)
    mixed = [a for (_, a), f in zip(inputs, floats_of) if f not in (None, floats)]
    if mixed:   # one kernel computes in one float type: a part computed in another one runs first
        for a in mixed:
            a.value
        return defer(name, args, tape)
    p = Pending()
    p.row, p.args, p.terms, p.inputs = row, tuple(args), tuple(terms), tuple(inputs)
    p.shape, p.kind, p.dtype = shape, kind, dtype
    p.tape, p.device, p.floats = tape, where, floats
    members.add(id(p))
    p.members, p.leaf_ids = frozenset(members), frozenset(leaf_ids)
    t = Tensor.deferred(p, tape if tracked else None)  # comparisons of tracked values are constants
    p.owner = tape.defer(t)
    _stats["deferred"] += 1
    return t


def _expression(root: Pending):
    """``(order, function)``: the pending DAG under ``root`` in topological order (depth first, the
    last argument first) and the function of its expression, made of the terms the ops kept, with
    the calls in that order. Deferred Tensors computed since the DAG was built are leaves now."""
    builder = FunctionBuilder("fused")
    order: list[Pending] = []
    calls: dict = {}
    stack = [(root, False)]
    while stack:
        p, expanded = stack.pop()
        if id(p) in calls:
            continue
        inputs = p.inputs
        if inputs and not expanded:
            stack.append((p, True))
            for _, a in inputs:
                q = a.pending
                if q is not None and id(q) not in calls:
                    stack.append((q, False))
            continue
        args = p.terms
        if inputs:   # deferred when the op was: its call, or a leaf once computed since
            args = list(args)
            for k, a in inputs:
                q = a.pending
                args[k] = calls[id(q)] if q is not None else _term(a, p.tape)
        calls[id(p)] = builder.call(p.row, *args)
        order.append(p)
    return order, builder.build([calls[id(root)]])


def _compute(tensor: Tensor, root: Pending) -> None:
    _stats["computed"] += 1
    if not any([a.pending is not None for _, a in root.inputs]):
        _op_by_op([root], tensor)   # one primitive saves no pass over memory: numpy's op is cheaper
        return
    order, fn = _expression(root)
    if not fn.is_compiled:
        if len(_seen) > _SEEN_LIMIT:
            _seen.clear()
        _seen[fn.key] += 1
        if _seen[fn.key] < _settings["compile_after"]:   # a later sighting will decide otherwise
            _changes[0] += 1
            _op_by_op(order, tensor)
            return
        _stats["kernels_built"] += 1
    dual, outs = fn.run(root.floats, launch=launch)
    _stats["fused_launches"] += 1
    _stats["fused_ops"] += len(order)
    if not fn.wrt:
        bind(tensor, outs[0])
        return
    partials = dict(dual.constants)
    for (m, k), array in zip(dual.slots, outs[1:]):
        partials[(m, k)] = array
    with recording(root.tape):
        bind(tensor, broadcast_node("fused", fn.sources, [outs[0]], partials, fresh=True))


def _op_by_op(order: list, tensor: Tensor) -> None:
    """Evaluate the DAG one primitive at a time (one tape node each, in topological order); every
    deferred Tensor of it receives its value, so later uses do not compute it again."""
    with recording(order[-1].tape):
        for p in order:
            result = apply_primitive_now(p.row.name, *p.args)
            _stats["op_by_op"] += 1
            owner = tensor if p is order[-1] else p.owner()
            if owner is not None and owner.pending is p:
                bind(owner, result)
