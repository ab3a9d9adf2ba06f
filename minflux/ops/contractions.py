"""Tensor contractions: einsum, tensordot, dot and outer, with numpy's rules.

The gradient of an einsum operand is another einsum: the output gradient contracted with the other
operands onto that operand's subscripts. Letters the operand shares with nobody are broadcast back,
a letter repeated within an operand (a diagonal or a trace) gets an identity matrix, and an axis the
operand broadcast from length 1 is summed back to length 1.
"""
from __future__ import annotations

import string

from ..autograd import record
from ..backend import as_array, get_array_module
from ..pointwise.primitives import multiply
from ._common import normalise_axis, value_of
from .shapes import reshape


def _split_subscripts(subscripts: str, shapes: list[tuple]) -> tuple[list[str], str]:
    """Explicit per-operand letters and output letters, with every ``...`` spelled out."""
    spec = subscripts.replace(" ", "")
    if "->" in spec:
        inputs, output = spec.split("->")
        explicit = True
    else:
        inputs, output, explicit = spec, "", False
    parts = inputs.split(",")
    if len(parts) != len(shapes):
        raise ValueError(f"mf.einsum: {subscripts!r} names {len(parts)} operands, got {len(shapes)}")
    used = set(spec) - set(".,->")
    spare = [c for c in string.ascii_letters if c not in used]
    ellipsis_dims = 0
    for part, shape in zip(parts, shapes):
        if "..." in part:
            ellipsis_dims = max(ellipsis_dims, len(shape) - len(part.replace("...", "")))
    if len(spare) < ellipsis_dims:
        raise ValueError(f"mf.einsum: {subscripts!r} leaves too few letters for its '...' axes")
    broadcast_letters = "".join(spare[:ellipsis_dims])
    spelled = []
    for part, shape in zip(parts, shapes):
        if "..." in part:
            n = len(shape) - len(part.replace("...", ""))
            part = part.replace("...", broadcast_letters[ellipsis_dims - n:] if n else "")
        if len(part) != len(shape):
            raise ValueError(f"mf.einsum: subscripts {part!r} do not match an operand of shape {shape}")
        spelled.append(part)
    if explicit:
        output = output.replace("...", broadcast_letters)
    else:
        counts = {c: sum(p.count(c) for p in spelled) for c in set("".join(spelled))}
        output = broadcast_letters + "".join(
            sorted(c for c, n in counts.items() if n == 1 and c not in broadcast_letters))
    return spelled, output


def _letter_sizes(parts: list[str], shapes: list[tuple]) -> dict:
    sizes: dict = {}
    for part, shape in zip(parts, shapes):
        for c, n in zip(part, shape):
            if sizes.get(c, 1) == 1:
                sizes[c] = n
    return sizes


def _operand_gradient(xp, k, parts, output, g, values, sizes, optimize):
    """The gradient of operand ``k`` of ``einsum(output <- parts)`` given the output gradient ``g``."""
    target = parts[k]
    others = [(p, v) for j, (p, v) in enumerate(zip(parts, values)) if j != k]
    available = set(output).union(*(set(p) for p, _ in others))
    unique = "".join(dict.fromkeys(target))
    reachable = "".join(c for c in unique if c in available)
    spec = ",".join([output] + [p for p, _ in others]) + "->" + reachable
    r = xp.einsum(spec, g, *[v for _, v in others], optimize=optimize)
    if reachable != unique:  # letters summed away inside this operand alone: broadcast back
        r = _broadcast_letters(xp, r, reachable, unique, sizes)
    if unique != target:  # repeated letters: put the values on the diagonal
        used = set("".join(parts) + output)
        spare = iter(c for c in string.ascii_letters if c not in used)
        renamed, eyes, seen = [], [], set()
        for c in target:
            if c in seen:
                fresh = next(spare)
                renamed.append(fresh)
                eyes.append((c + fresh, xp.eye(sizes[c], dtype=r.dtype)))
            else:
                seen.add(c)
                renamed.append(c)
        renamed = "".join(renamed)
        spec = ",".join([unique] + [e for e, _ in eyes]) + "->" + renamed
        r = xp.einsum(spec, r, *[m for _, m in eyes])
    shape = tuple(values[k].shape)
    summed = tuple(i for i, (n, m) in enumerate(zip(shape, r.shape)) if n == 1 and m != 1)
    if summed:
        r = xp.sum(r, axis=summed, keepdims=True)
    if tuple(r.shape) != shape:  # a letter that only length-1 axes of the others carried
        r = xp.broadcast_to(r, shape)
    return r


def _broadcast_letters(xp, r, have: str, want: str, sizes: dict):
    """``r`` (letters ``have``, a subsequence of ``want``) broadcast to all of ``want``."""
    shape = [r.shape[have.index(c)] if c in have else 1 for c in want]
    return xp.broadcast_to(r.reshape(shape), tuple(sizes[c] for c in want))


def einsum(subscripts: str, *operands, optimize=True):
    """Einstein summation, as ``numpy.einsum`` (explicit ``->``, implicit output, ``...``, traces).

    ``optimize`` is passed to the array module's einsum (True lets it pick a contraction order and
    use BLAS); the backward pass is one einsum per operand that needs a gradient.

    >>> import minflux as mf, numpy as np
    >>> a, b = np.arange(6.0).reshape(2, 3), np.ones((3, 4))
    >>> mf.einsum("ij,jk->ik", a, b).shape
    (2, 4)
    >>> float(mf.einsum("ii", np.eye(3) * 2))
    6.0
    >>> mf.gradient(lambda a: mf.einsum("ij,jk->", a, b), a)[0]
    array([[4., 4., 4.],
           [4., 4., 4.]])
    """
    if not isinstance(subscripts, str):
        raise TypeError("mf.einsum takes the subscripts string first, e.g. mf.einsum('ij,jk->ik', a, b)")
    if not operands:
        raise ValueError("mf.einsum needs at least one operand")
    values = [value_of(x) for x in operands]
    xp = get_array_module(*values, op="mf.einsum")
    values = [as_array(xp, v) for v in values]
    shapes = [tuple(v.shape) for v in values]
    parts, output = _split_subscripts(subscripts, shapes)
    spec = ",".join(parts) + "->" + output
    try:
        out = xp.einsum(spec, *values, optimize=optimize)
    except ValueError as e:
        raise ValueError(f"mf.einsum: {subscripts!r} does not fit operands of shapes {shapes}: {e}") from e
    sizes = _letter_sizes(parts, shapes)

    def vjp(g, needs):
        return [_operand_gradient(xp, k, parts, output, g, values, sizes, optimize) if needs[k] else None
                for k in range(len(values))]

    return record("einsum", out, list(operands), vjp)


def _tensordot_axes(axes, na: int, nb: int, sa: tuple, sb: tuple) -> tuple[list[int], list[int]]:
    if isinstance(axes, int):
        if not 0 <= axes <= min(na, nb):
            raise ValueError(f"mf.tensordot: axes={axes} does not fit shapes {sa} and {sb}")
        return list(range(na - axes, na)), list(range(axes))
    try:
        a_axes, b_axes = axes
    except (TypeError, ValueError) as e:
        raise TypeError("mf.tensordot: axes must be an int or a pair of axis sequences, "
                        f"got {axes!r}") from e
    a_axes = [a_axes] if isinstance(a_axes, int) else list(a_axes)
    b_axes = [b_axes] if isinstance(b_axes, int) else list(b_axes)
    if len(a_axes) != len(b_axes):
        raise ValueError(f"mf.tensordot: {len(a_axes)} axes of a against {len(b_axes)} axes of b")
    a_axes = [normalise_axis(a, na, "mf.tensordot", sa) for a in a_axes]
    b_axes = [normalise_axis(b, nb, "mf.tensordot", sb) for b in b_axes]
    for i, j in zip(a_axes, b_axes):
        if sa[i] != sb[j]:
            raise ValueError(f"mf.tensordot: axis {i} of shape {sa} has length {sa[i]} but axis {j} "
                             f"of shape {sb} has length {sb[j]}")
    return a_axes, b_axes


def tensordot(a, b, axes=2):
    """Sum products over ``axes`` of ``a`` and ``b`` (an int: the last ``axes`` of ``a`` against the
    first of ``b``; or a pair of axis lists), as ``numpy.tensordot``.

    >>> import minflux as mf, numpy as np
    >>> mf.tensordot(np.ones((2, 3, 4)), np.ones((4, 3, 5)), axes=([1, 2], [1, 0])).shape
    (2, 5)
    """
    av, bv = value_of(a), value_of(b)
    xp = get_array_module(av, bv, op="mf.tensordot")
    av, bv = as_array(xp, av), as_array(xp, bv)
    sa, sb = tuple(av.shape), tuple(bv.shape)
    a_axes, b_axes = _tensordot_axes(axes, av.ndim, bv.ndim, sa, sb)
    out = xp.tensordot(av, bv, axes=(a_axes, b_axes))
    a_free = [i for i in range(av.ndim) if i not in a_axes]
    b_free = [i for i in range(bv.ndim) if i not in b_axes]

    def vjp(g, needs):
        ga = gb = None
        g_a = list(range(len(a_free)))  # axes of g that came from a
        g_b = list(range(len(a_free), g.ndim))
        if needs[0]:  # axes of t: a_free, then a's contracted axes in the order b holds them
            t = xp.tensordot(g, bv, axes=(g_b, b_free))
            ga = xp.transpose(t, _inverse(a_free + [a_axes[b_axes.index(j)] for j in sorted(b_axes)]))
        if needs[1]:  # axes of t: b's contracted axes in the order a holds them, then b_free
            t = xp.tensordot(av, g, axes=(a_free, g_a))
            gb = xp.transpose(t, _inverse([b_axes[a_axes.index(i)] for i in sorted(a_axes)] + b_free))
        return [ga, gb]

    return record("tensordot", out, [a, b], vjp)


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def dot(a, b):
    """``numpy.dot``: the inner product of vectors, the matrix product of matrices, and for N-D
    arrays a sum over the last axis of ``a`` and the second-to-last of ``b`` (no batching: use
    `matmul` for that); a scalar operand multiplies.

    >>> import minflux as mf, numpy as np
    >>> float(mf.dot(np.array([1.0, 2.0]), np.array([3.0, 4.0])))
    11.0
    >>> mf.dot(np.ones((2, 3, 4)), np.ones((5, 4, 6))).shape
    (2, 3, 5, 6)
    """
    av, bv = value_of(a), value_of(b)
    na, nb = getattr(av, "ndim", 0), getattr(bv, "ndim", 0)
    if na == 0 or nb == 0:
        return multiply(a, b)
    return tensordot(a, b, axes=([na - 1], [0 if nb == 1 else nb - 2]))


def outer(a, b):
    """The outer product of ``a`` and ``b`` flattened: ``out[i, j] = a.ravel()[i] * b.ravel()[j]``.

    >>> import minflux as mf, numpy as np
    >>> mf.outer(np.array([1.0, 2.0]), np.array([1.0, 10.0, 100.0]))
    array([[  1.,  10., 100.],
           [  2.,  20., 200.]])
    """
    return multiply(reshape(a, (-1, 1)), reshape(b, (1, -1)))
