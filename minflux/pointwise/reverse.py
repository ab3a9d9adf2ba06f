"""Reverse mode for scalar functions: the typed IR evaluated op by op on Tensors.

The numpy evaluator of the compiler runs the function with each primitive applied as a minflux op
(one tape node per op), branches as ``where`` and loops as masked iterations: the pure reverse-mode
baseline that ``mode="reverse"`` selects.

>>> import minflux as mf, numpy as np
>>> mf.gradient(lambda x: mf.sum(mf.broadcast(lambda x: x * x, x, mode="reverse")), np.ones(2))[0]
array([2., 2.])
"""
from __future__ import annotations

import numpy as np

from ..autograd import active_tape
from ..backend import as_array, get_array_module
from ..compiler import ArrayOps, If, Loop, differentiable_dependence, evaluate, kind_dtype, walk
from ..schedule import recording_of
from ..tensor import Tensor, unwrap
from .eager import apply_primitive_now
from .node import broadcast_node


class _TapeOps(ArrayOps):
    """Evaluator ops that apply minflux elementwise ops, so each one is a tape node."""

    def call(self, op, args):
        if op in ("float", "int"):
            return ArrayOps.call(self, op, [unwrap(a) for a in args])
        return apply_primitive_now(op, *args)

    def select(self, mask, new, old):
        return apply_primitive_now("where", mask, new, old)

    def truth(self, value):
        return ArrayOps.truth(self, unwrap(value))


def run_reverse(cf, args, arrays, kinds, float_dtype, shape):
    """Evaluate compiled function ``cf`` op by op; ``arrays`` etc. come from `minflux.compiler.prepare`."""
    xp = get_array_module(*arrays)
    fn = cf.typed_for(kinds)
    recording = recording_of(arrays)
    if recording is not None and any(isinstance(s, (If, Loop)) for s in walk(fn.body)):
        raise recording.refuse(
            f"runs {cf.name} with mode='reverse' (its branches and loops decided on the data one op at a "
            "time; mode='auto' or 'mixed' decides them inside a compiled kernel, which a replay repeats)")
    tape = active_tape()
    first_node = len(tape.nodes) if tape is not None else 0
    inputs = [_in_float_dtype(a, arr, tape) if isinstance(a, Tensor) and kind == "f" else arr
              for a, arr, kind in zip(args, arrays, kinds)]
    outs = evaluate(fn, inputs, _TapeOps(xp, float_dtype, fn.subroutines))
    if cf.parsed.loop_sites:
        outs = cf.check_loops([unwrap(o) if k == fn.n_outputs - 1 else o for k, o in enumerate(outs)],
                              fn.n_outputs)
    result = []
    taken = [unwrap(a) for a in args] + list(arrays)  # results never alias an input or each other
    for out, kind in zip(outs, fn.output_kinds):  # the flag is the last output kind: zip drops it
        value = unwrap(out)
        if any(value is t for t in taken):
            out = apply_primitive_now("add", out, 0) if isinstance(out, Tensor) else xp.array(value, copy=True)
            value = unwrap(out)
        taken.append(value)
        if tuple(np.shape(value)) != shape:
            dtype = kind_dtype(kind, float_dtype)
            out = apply_primitive_now("add", out, xp.zeros(shape, dtype)) if kind == "f" else \
                xp.broadcast_to(as_array(xp, value, dtype), shape).copy()
        elif not isinstance(out, Tensor) and not hasattr(out, "shape"):
            out = as_array(xp, out)
        result.append(out)
    wrt = [k for k, a in enumerate(args) if kinds[k] == "f" and isinstance(a, Tensor) and a._tape is tape]
    if tape is not None and wrt:
        deps = differentiable_dependence(fn, wrt)
        result = [_link(cf.name, out, deps[m], args, tape, first_node) for m, out in enumerate(result)]
    elif any(isinstance(a, Tensor) for a in args):
        result = [out if isinstance(out, Tensor) else Tensor(out) for out in result]
    return tuple(result) if len(result) > 1 else result[0]


def _in_float_dtype(a: Tensor, array, tape):
    """Float Tensor argument ``a`` as ``array``, the kernel's float type (`prepare`): itself when it is
    of that type, else a cast recorded with partial 1 (a tracked float32 argument of a function that
    computes in float64), so each op computes in that one type as the kernels do."""
    if array is unwrap(a):
        return a
    if tape is not None and a._tape is tape:
        return broadcast_node("astype", [a], [array], {(0, 0): 1})
    return array


def _reached(tape, first_node: int, slot: int) -> set:
    """The slots that ``slot`` reaches backwards through the nodes recorded since ``first_node``."""
    reached = {slot}
    for node in reversed(tape.nodes[first_node:]):
        if any(s in reached for s in node.outputs):
            reached.update(s for s in node.inputs if s)
    return reached


def _link(name: str, out, depends: frozenset, args, tape, first_node: int):
    """Output ``out`` of the op-by-op evaluation, linked with partial 0 to every input it depends on
    differentiably (`compiler.dependence`) but did not reach on the tape (a branch no lane took, an
    empty array): the same gradients, zeros or None, as the kernel modes give."""
    tracked = isinstance(out, Tensor) and out._tape is tape and out._slot
    reached = _reached(tape, first_node, out._slot) if tracked else set()
    missing = [k for k in sorted(depends) if args[k]._slot not in reached]
    if not missing:
        return out if isinstance(out, Tensor) else Tensor(out)
    linked = ([out] if tracked else []) + [args[k] for k in missing]
    partials = {(0, j): 0.0 for j in range(len(linked))}
    if tracked:
        partials[(0, 0)] = 1
    return broadcast_node(name, linked, [unwrap(out)], partials)
