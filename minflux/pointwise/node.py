"""The broadcast tape node: outputs of an elementwise broadcast and their per-element partials.

A broadcast's Jacobian is diagonal per input, so for outputs ``y_m`` and differentiable inputs
``x_k`` the node keeps ``dy_m/dx_k`` elementwise and its backward pass is
``grad_x_k = sum_to(sum_m grad_y_m * dy_m/dx_k, x_k.shape)``. A partial that is a Python number
(the 1 of ``x + y``) is stored as that number, never as an array.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Sequence

import numpy as np

from ..autograd import is_seed_broadcast, record
from ..backend import get_array_module
from ..broadcasting import sum_to
from ..compiler import get_elementwise_backend
from ..schedule import operation
from ..tensor import Tensor, unwrap
from .node_kernel import gradient_sums, gradient_sums_command, walk


def _finish(acc, shape, dtype):
    """Reduce a summed output gradient to one argument's shape and dtype."""
    if acc.shape != shape:
        acc = sum_to(acc, shape)
    if dtype is not None and acc.dtype != dtype:
        acc = acc.astype(dtype)
    return acc


def _may_be_nonfinite(x) -> bool:
    """False when every element of ``x`` is known finite (checked on the host only, never on a GPU)."""
    if type(x) is np.ndarray:   # the method and math's test: numpy's wrappers cost more than a small sum
        return not math.isfinite(x.sum()) if x.dtype.kind != "c" else not np.isfinite(x.sum())
    if isinstance(x, np.generic):
        return not np.isfinite(x)
    return True  # device data: asking would copy to the host; the guarded product is always right


def _finite_seed(g) -> bool:
    """True when output gradient ``g`` is known finite: the seed (ones), or finite host data."""
    return is_seed_broadcast(g) or not _may_be_nonfinite(g)


def _times(g, p, fresh: bool = False):
    """``g * p`` where a zero factor annihilates: ``0 * inf = 0 * nan = 0`` (see `compiler.rules`).
    ``fresh``: ``p`` is a new array no one else holds, which the product may overwrite."""
    if p.__class__ is int or p.__class__ is float:
        if p == 1:
            return g
        if p == 0:
            return get_array_module(g).zeros_like(g)
        return g * p
    if fresh and getattr(p, "shape", None) == getattr(g, "shape", ()) and p.dtype == g.dtype:
        # reuse p (the gradient of a sum needs no pass at all)
        return _product_into_partial(g, p, is_seed_broadcast(g))
    return _annihilating_product(g, p, is_seed_broadcast(g))


@operation(results="views", views_of=("p",))
def _product_into_partial(g, p, seed: bool):
    """`_times` into ``p``, whatever the data, so that a replay finds the result where it was: its
    checks look at the data, so they are one operation. One compiled pass where the arrays allow and
    are large enough (`node_kernel`); else a plain product where both factors are finite (no zero can
    meet an infinity or a NaN), the guarded one otherwise."""
    if seed:
        return p
    how = _kernel_walk([g], [p], [p]) if p.size >= ROWS_MIN_ELEMENTS else None
    if how is not None:
        return gradient_sums([g], [p], _one_term_each(1), in_place=True, how=how)[0]
    if _finite_seed(g) and not _may_be_nonfinite(p):
        return get_array_module(p).multiply(g, p, out=p)
    p[...] = _guarded(g, p)
    return p


@operation(results="out")
def _annihilating_product(g, p, seed: bool, out=None):
    """`_times` as a new array (written into ``out`` where given): its checks look at the data, so
    they are one operation. The plain product is checked instead of both factors (one check, not
    two): where it is finite, no zero met an infinity or a NaN. (Its native command is the one
    compiled pass of `node_kernel`, which gives the same bits.)"""
    product = get_array_module(g, p).multiply(g, p, out=out)
    if seed or not _may_be_nonfinite(product):
        return product   # no 0 * inf or 0 * nan in it: those would have made a nan
    if out is None:
        return _guarded(g, p)
    out[...] = _guarded(g, p)
    return out


def _guarded(g, p):
    """``g * p`` with a zero factor annihilating the other (inf or nan) one: a product that is not
    finite where a factor is zero is zero."""
    xp = get_array_module(g, p)
    product = g * p
    return xp.where(((g == 0) | (p == 0)) & ~xp.isfinite(product), 0, product).astype(product.dtype, copy=False)


def _gradient_sums(grads: list, partials: list, structure: tuple, fresh: bool) -> list:
    """Per argument, the sum of its terms ``grads[g] * partials[p]`` (``structure[q]``: the terms of
    sum ``q`` in order), as one compiled kernel (`node_kernel`) where the arrays allow, else term by
    term; both give the same values, zeros' signs included. ``fresh``: the partials may be overwritten."""
    if fresh:
        return _gradient_sums_into_partials(grads, partials, structure)
    return _new_gradient_sums(grads, partials, structure)


@operation(results="views", views_of=("partials",))
def _gradient_sums_into_partials(grads: list, partials: list, structure: tuple) -> list:
    """`_gradient_sums` of partials no one else holds: each sum in its first partial where one kernel
    does them all (or its one term is the product into its partial), else new arrays."""
    how = _kernel_walk(grads, partials, [partials[terms[0][1]] for terms in structure])
    if how is not None:
        return gradient_sums(grads, partials, structure, in_place=True, how=how)
    return [_sum_terms([(grads[g], partials[p]) for g, p in terms], True) for terms in structure]


@operation(results="out")
def _new_gradient_sums(grads: list, partials: list, structure: tuple, out=None) -> list:
    """`_gradient_sums` of partials others may hold: new arrays (written into ``out`` where given)."""
    how = _kernel_walk(grads, partials, [])
    if how is not None:
        whole = out is not None and not any(o is None for o in out) and _kernel_walk(grads, partials, out)
        sums = gradient_sums(grads, partials, structure, sums=out if whole else None, how=whole or how)
    else:
        sums = [_sum_terms([(grads[g], partials[p]) for g, p in terms], False) for terms in structure]
    if out is not None:
        for o, s in zip(out, sums):
            if o is not None and o is not s:
                o[...] = s
        return [s if o is None else o for o, s in zip(out, sums)]
    return sums


def _sum_terms(terms: list, fresh: bool):
    """The sum of ``g * p`` over ``terms`` of ``(g, p)``, term by term, left to right."""
    acc = None
    for g, p in terms:
        term = _times(g, p, fresh)
        acc = term if acc is None else acc + term
    return acc


def _product_command(args: tuple, kwargs: dict, errstate: dict):
    if len(args) != 3 or kwargs or args[2] or _kernel_walk([args[0]], [args[1]], [args[1]], True) is None:
        return None
    return gradient_sums_command([args[0]], [args[1]], _one_term_each(1))


def _annihilating_command(args: tuple, kwargs: dict, errstate: dict):
    out = kwargs.get("out")
    if len(args) != 3 or out.__class__ is not np.ndarray or _kernel_walk([args[0]], [args[1]], [out], True) is None:
        return None
    return gradient_sums_command([args[0]], [args[1]], _one_term_each(1), sums=[out])


def _into_partials_command(args: tuple, kwargs: dict, errstate: dict):
    if len(args) != 3 or kwargs or \
            _kernel_walk(args[0], args[1], [args[1][terms[0][1]] for terms in args[2]], True) is None:
        return None
    return gradient_sums_command(*args)


def _new_sums_command(args: tuple, kwargs: dict, errstate: dict):
    out = kwargs.get("out")
    if len(args) != 3 or out is None or any(o is None for o in out) or \
            _kernel_walk(args[0], args[1], out, True) is None:
        return None
    return gradient_sums_command(*args, sums=out)


# what a recording calls
_product_into_partial.__wrapped_operation__.native_command = _product_command
_annihilating_product.__wrapped_operation__.native_command = _annihilating_command
_annihilating_product.__wrapped_operation__.fills_new_results = True   # a new array, when no out= is given
_gradient_sums_into_partials.__wrapped_operation__.native_command = _into_partials_command
_new_gradient_sums.__wrapped_operation__.native_command = _new_sums_command
# whether they return views of their arguments or new arrays depends on the arguments' layouts and
# the constants, never on the data (`minflux.schedule.native`)
_gradient_sums_into_partials.__wrapped_operation__.steady_results = True
_product_into_partial.__wrapped_operation__.steady_results = True


ROWS_MIN_ELEMENTS = 1 << 14
"""Elements below which a call (not a native command) takes the numpy path rather than a kernel that
walks by rows (`node_kernel.Walk`), or than the one-term kernel of a product into its partial: working
out the walk costs more than the passes it saves (measured on the 2-core AMD EPYC: 16.1 against 17.0
us at 64 x 256 with a broadcast partial, 12.5 against 7.2 at 16 x 16; a product into its partial 5.3
against 5.2 us at 4k elements, 4.7 against 3.5 at 256, 15 against 29 at 64k; both give the same bits)."""


def _kernel_walk(grads: list, partials: list, written: list, command: bool = False):
    """How one `node_kernel` pass walks ``grads``, ``partials`` and ``written`` (the arrays it writes
    that exist already) to compute the sums (a `Walk`), or None where it cannot, or where a call
    (not a ``command``) is faster on numpy's path."""
    if get_elementwise_backend() != "numba":
        return None
    return walk(grads, partials, written, rows=command or getattr(grads[0], "size", 0) >= ROWS_MIN_ELEMENTS)


@functools.cache
def _one_term_each(n: int) -> tuple:
    """The `_gradient_sums` structure of ``n`` sums of one term each, from one output gradient."""
    return tuple(((0, j),) for j in range(n))


_NUMBERS = (int, float)


def broadcast_node(name: str, args: Sequence[Any], outputs: Sequence[Any], partials: dict,
                   fresh: bool = False, values: Sequence[Any] | None = None):
    """Record one broadcast node and return its outputs (Tensors when an argument is tracked).

    ``partials[(m, k)]`` is ``d outputs[m] / d args[k]`` (an array broadcastable to the output, or a
    number) for every output ``m`` and every argument ``k`` that needs a gradient. The node keeps
    only these partials and the arguments' shapes, never the inputs. ``fresh=True`` promises that
    the partial arrays are new and referenced nowhere else, so the backward pass may overwrite them.
    ``values`` are the arguments' arrays when the caller has them already.

    >>> import minflux as mf, numpy as np
    >>> def double(x):
    ...     return broadcast_node("double", [x], [2 * x.value], {(0, 0): 2})
    >>> mf.gradient(lambda x: mf.sum(double(x)), np.ones(2))[0]
    array([2., 2.])
    """
    n_args = len(args)
    terms = []  # (output m, argument k, partial, argument shape, argument dtype)
    for (m, k), p in partials.items():
        value = unwrap(args[k]) if values is None else values[k]
        if value.__class__ is np.ndarray:
            terms.append((m, k, p, value.shape, value.dtype))
        else:
            terms.append((m, k, p, tuple(getattr(value, "shape", ())), getattr(value, "dtype", None)))

    if len(outputs) == 1:
        def vjp(g, needs):   # vjp_multi for one output, whose arguments have one term each
            wanted = [t for t in terms if needs[t[1]]]
            grads = [None] * n_args
            if len(wanted) > 1 and not any(t[2].__class__ in _NUMBERS for t in wanted) and \
                    not (fresh and is_seed_broadcast(g)):   # the seed's gradients are the partials
                sums = _gradient_sums([g], [t[2] for t in wanted], _one_term_each(len(wanted)), fresh)
                for (_, k, _, shape, dtype), acc in zip(wanted, sums):
                    grads[k] = _finish(acc, shape, dtype)
                return grads
            for _, k, p, shape, dtype in wanted:
                grads[k] = _finish(_times(g, p, fresh), shape, dtype)
            return grads

    def vjp_multi(gout, needs):
        wanted = [t for t in terms if gout[t[0]] is not None and needs[t[1]]]
        grads = [None] * n_args
        if len(wanted) > 1 and not any(t[2].__class__ in _NUMBERS for t in wanted):
            # one pass for every sum: each argument's terms in the node's order
            outs = list(dict.fromkeys(t[0] for t in wanted))
            groups = [[t for t in wanted if t[1] == k] for k in dict.fromkeys(t[1] for t in wanted)]
            structure, first = [], 0
            for group in groups:
                structure.append(tuple((outs.index(t[0]), first + j) for j, t in enumerate(group)))
                first += len(group)
            sums = _gradient_sums([gout[m] for m in outs], [t[2] for group in groups for t in group],
                                  tuple(structure), fresh)
            for group, acc in zip(groups, sums):
                _, k, _, shape, dtype = group[0]
                grads[k] = _finish(acc, shape, dtype)
            return grads
        by_argument: dict[int, list] = {}
        meta = {}
        for m, k, p, shape, dtype in wanted:
            by_argument.setdefault(k, []).append((gout[m], p))
            meta[k] = (shape, dtype)
        for k, k_terms in by_argument.items():
            grads[k] = _finish(_sum_terms(k_terms, fresh), *meta[k])
        return grads

    if len(outputs) == 1:
        return record(name, outputs[0], args, vjp)
    return record(name, list(outputs), args, vjp_multi, multi=True)


def broadcast_outputs(name: str, args: Sequence[Any], outputs: Sequence[Any], partials: dict,
                      fresh: bool = False) -> list:
    """`broadcast_node` for the outputs that have partials; the others come back untracked.

    An output with no entry in ``partials`` depends on no tracked argument through a differentiable
    operation (a zero partial that still links them is an entry 0), so it is a constant for the
    tape, as the result of any other op on untracked values is.

    >>> import minflux as mf, numpy as np
    >>> def two(x):
    ...     return broadcast_outputs("two", [x], [2 * x.value, x.value > 0], {(0, 0): 2})
    >>> mf.gradient(lambda x: mf.sum(two(x)[0]) + mf.sum(two(x)[1]), np.ones(2))[0]
    array([2., 2.])
    """
    if len(outputs) == 1:   # tracked where it has a partial
        return [broadcast_node(name, args, outputs, partials, fresh=fresh) if partials else Tensor(outputs[0])]
    tracked = sorted({m for m, _ in partials})
    result = [Tensor(o) for o in outputs]
    if not tracked:
        return result
    index = {m: i for i, m in enumerate(tracked)}
    recorded = broadcast_node(name, args, [outputs[m] for m in tracked],
                              {(index[m], k): p for (m, k), p in partials.items()}, fresh=fresh)
    for m, t in zip(tracked, recorded if len(tracked) > 1 else [recorded]):
        result[m] = t
    return result
