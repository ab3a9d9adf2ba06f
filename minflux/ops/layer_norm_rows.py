"""Compiled row kernels for `layer_norm` on the CPU: the forward pass reads each row twice and writes it
once, the backward pass reads the gradient and the normalised row twice and writes once; numpy
spends about seven passes on the forward and eleven on the backward.

The kernels are LLVM IR compiled and cached like every elementwise kernel
(`minflux.runtime.kernel_loader.load_ir_kernel`): C-callable functions on raw pointers, keyed on their
text, the library versions and the host, linked from the private kernel directory only after its
trust and SHA-256 checks. With ``MINFLUX_ELEMENTWISE=numpy`` (`mf.set_elementwise_backend`) they are
not used and `layer_norm` takes its array formula. Reductions may be reassociated (so they
vectorise); infinities and NaNs propagate as in numpy.

>>> import numpy as np
>>> usable(np.ones((2, 3)), np.ones(3)) == (get_elementwise_backend() == "numba")
True
"""
from __future__ import annotations

import functools
import threading

import numpy as np

from ..backend import is_numpy_array
from ..compiler import get_elementwise_backend
from ..runtime.native_runner import Command, function_address, kernel_words
from ..runtime.pointers import pointers

_FLAGS = "reassoc contract nsz arcp"   # each row's sums may be reassociated, so that they vectorise


def _casts(t: str):
    """Lines converting a value of type ``t`` to double and back (a no-op cast for double)."""
    if t == "double":
        same = lambda v, name: f"  {name} = bitcast double {v} to double"  # noqa: E731
        return same, same
    return (lambda v, name: f"  {name} = fpext {t} {v} to double",
            lambda v, name: f"  {name} = fptrunc double {v} to {t}")


def _forward(t: str, f: str) -> list:
    """x, scale, shift (``t``), eps (double) -> out, normalised, reciprocal (``t``). Sums in double."""
    wide, narrow = _casts(t)
    return [
        "define void @minflux_layer_norm(i64 %r0, i64 %r1, i64 %columns, i64 %total, i64 %rows, ptr %px, "
        "ptr %pscale, ptr %pshift, ptr %peps, ptr %pout, ptr %pnormalised, ptr %preciprocal) {",
        "entry:", "  %eps = load double, ptr %peps", "  %count = sitofp i64 %columns to double",
        "  br label %row",
        "row:", "  %r = phi i64 [%r0, %entry], [%r.next, %normalise.end]", "  %base = mul i64 %r, %columns",
        f"  %x = getelementptr {t}, ptr %px, i64 %base", f"  %out = getelementptr {t}, ptr %pout, i64 %base",
        f"  %normalised = getelementptr {t}, ptr %pnormalised, i64 %base", "  br label %sum",
        "sum:", "  %c1 = phi i64 [0, %row], [%c1.next, %sum]", "  %total1 = phi double [0.0, %row], [%total1.next, %sum]",
        f"  %x1.at = getelementptr {t}, ptr %x, i64 %c1", f"  %x1 = load {t}, ptr %x1.at", wide("%x1", "%x1.d"),
        f"  %total1.next = fadd {f} double %total1, %x1.d", "  %c1.next = add i64 %c1, 1",
        "  %more1 = icmp slt i64 %c1.next, %columns", "  br i1 %more1, label %sum, label %sum.end",
        "sum.end:", f"  %mean = fdiv {f} double %total1.next, %count", "  br label %squares",
        "squares:", "  %c2 = phi i64 [0, %sum.end], [%c2.next, %squares]",
        "  %total2 = phi double [0.0, %sum.end], [%total2.next, %squares]",
        f"  %x2.at = getelementptr {t}, ptr %x, i64 %c2", f"  %x2 = load {t}, ptr %x2.at", wide("%x2", "%x2.d"),
        f"  %d = fsub {f} double %x2.d, %mean", f"  %dd = fmul {f} double %d, %d",
        f"  %total2.next = fadd {f} double %total2, %dd", "  %c2.next = add i64 %c2, 1",
        "  %more2 = icmp slt i64 %c2.next, %columns", "  br i1 %more2, label %squares, label %squares.end",
        "squares.end:", f"  %variance = fdiv {f} double %total2.next, %count",
        f"  %shifted = fadd {f} double %variance, %eps", f"  %deviation = call {f} double @llvm.sqrt.f64(double %shifted)",
        f"  %inverse = fdiv {f} double 1.0, %deviation", narrow("%inverse", "%inverse.t"),
        f"  %reciprocal.at = getelementptr {t}, ptr %preciprocal, i64 %r", f"  store {t} %inverse.t, ptr %reciprocal.at",
        narrow("%mean", "%mean.t"), "  br label %normalise",
        "normalise:", "  %c3 = phi i64 [0, %squares.end], [%c3.next, %normalise]",
        f"  %x3.at = getelementptr {t}, ptr %x, i64 %c3", f"  %x3 = load {t}, ptr %x3.at",
        f"  %centred = fsub {f} {t} %x3, %mean.t", f"  %n = fmul {f} {t} %centred, %inverse.t",
        f"  %n.at = getelementptr {t}, ptr %normalised, i64 %c3", f"  store {t} %n, ptr %n.at",
        f"  %scale.at = getelementptr {t}, ptr %pscale, i64 %c3", f"  %scale = load {t}, ptr %scale.at",
        f"  %shift.at = getelementptr {t}, ptr %pshift, i64 %c3", f"  %shift = load {t}, ptr %shift.at",
        f"  %ns = fmul {f} {t} %n, %scale", f"  %y = fadd {f} {t} %ns, %shift",
        f"  %y.at = getelementptr {t}, ptr %out, i64 %c3", f"  store {t} %y, ptr %y.at",
        "  %c3.next = add i64 %c3, 1", "  %more3 = icmp slt i64 %c3.next, %columns",
        "  br i1 %more3, label %normalise, label %normalise.end",
        "normalise.end:", "  %r.next = add i64 %r, 1", "  %rows.more = icmp slt i64 %r.next, %r1",
        "  br i1 %rows.more, label %row, label %done", "done:", "  ret void", "}",
        "declare double @llvm.sqrt.f64(double)"]


def _backward(t: str, f: str) -> list:
    """g, normalised, reciprocal, scale (``t``) -> g_x, g_scale, g_shift (``t``), the parameters'
    sums kept in double in ``sums`` (2 x columns) over rows ``r0`` to ``r1`` (at least one)."""
    wide, narrow = _casts(t)
    return [
        "define void @minflux_layer_norm(i64 %r0, i64 %r1, i64 %columns, i64 %total, i64 %rows, ptr %pg, "
        "ptr %pnormalised, ptr %preciprocal, ptr %pscale, ptr %pg_x, ptr %psums, ptr %pg_scale.t, "
        "ptr %pg_shift.t) {",
        "entry:", "  %count = sitofp i64 %columns to double", "  %pg_scale = getelementptr double, ptr %psums, i64 0",
        "  %pg_shift = getelementptr double, ptr %psums, i64 %columns", "  %twice = mul i64 %columns, 2",
        "  br label %zero",
        "zero:", "  %z = phi i64 [0, %entry], [%z.next, %zero]", "  %z.at = getelementptr double, ptr %psums, i64 %z",
        "  store double 0.0, ptr %z.at", "  %z.next = add i64 %z, 1", "  %z.more = icmp slt i64 %z.next, %twice",
        "  br i1 %z.more, label %zero, label %row",
        "row:", "  %r = phi i64 [%r0, %zero], [%r.next, %gx.end]", "  %base = mul i64 %r, %columns",
        f"  %g = getelementptr {t}, ptr %pg, i64 %base", f"  %normalised = getelementptr {t}, ptr %pnormalised, i64 %base",
        f"  %g_x = getelementptr {t}, ptr %pg_x, i64 %base", "  br label %sum",
        "sum:", "  %c1 = phi i64 [0, %row], [%c1.next, %sum]", "  %sum_g = phi double [0.0, %row], [%sum_g.next, %sum]",
        "  %weighted = phi double [0.0, %row], [%weighted.next, %sum]",
        f"  %g1.at = getelementptr {t}, ptr %g, i64 %c1", f"  %g1 = load {t}, ptr %g1.at",
        f"  %s1.at = getelementptr {t}, ptr %pscale, i64 %c1", f"  %s1 = load {t}, ptr %s1.at",
        f"  %n1.at = getelementptr {t}, ptr %normalised, i64 %c1", f"  %n1 = load {t}, ptr %n1.at",
        f"  %gn = fmul {f} {t} %g1, %s1", wide("%gn", "%gn.d"), f"  %sum_g.next = fadd {f} double %sum_g, %gn.d",
        f"  %gnn = fmul {f} {t} %gn, %n1", wide("%gnn", "%gnn.d"), f"  %weighted.next = fadd {f} double %weighted, %gnn.d",
        "  %c1.next = add i64 %c1, 1", "  %more1 = icmp slt i64 %c1.next, %columns",
        "  br i1 %more1, label %sum, label %params",
        "params:", "  %c2 = phi i64 [0, %sum], [%c2.next, %params]",
        f"  %g2.at = getelementptr {t}, ptr %g, i64 %c2", f"  %g2 = load {t}, ptr %g2.at",
        f"  %n2.at = getelementptr {t}, ptr %normalised, i64 %c2", f"  %n2 = load {t}, ptr %n2.at",
        f"  %gn2 = fmul {f} {t} %g2, %n2", wide("%gn2", "%gn2.d"), wide("%g2", "%g2.d"),
        "  %gs.at = getelementptr double, ptr %pg_scale, i64 %c2", "  %gs = load double, ptr %gs.at",
        f"  %gs.next = fadd {f} double %gs, %gn2.d", "  store double %gs.next, ptr %gs.at",
        "  %gh.at = getelementptr double, ptr %pg_shift, i64 %c2", "  %gh = load double, ptr %gh.at",
        f"  %gh.next = fadd {f} double %gh, %g2.d", "  store double %gh.next, ptr %gh.at",
        "  %c2.next = add i64 %c2, 1", "  %more2 = icmp slt i64 %c2.next, %columns",
        "  br i1 %more2, label %params, label %means",
        "means:", f"  %mg = fdiv {f} double %sum_g.next, %count", narrow("%mg", "%mean_g"),
        f"  %mgn = fdiv {f} double %weighted.next, %count", narrow("%mgn", "%mean_gn"),
        f"  %inverse.at = getelementptr {t}, ptr %preciprocal, i64 %r", f"  %inverse = load {t}, ptr %inverse.at",
        "  br label %gx",
        "gx:", "  %c3 = phi i64 [0, %means], [%c3.next, %gx]",
        f"  %g3.at = getelementptr {t}, ptr %g, i64 %c3", f"  %g3 = load {t}, ptr %g3.at",
        f"  %s3.at = getelementptr {t}, ptr %pscale, i64 %c3", f"  %s3 = load {t}, ptr %s3.at",
        f"  %n3.at = getelementptr {t}, ptr %normalised, i64 %c3", f"  %n3 = load {t}, ptr %n3.at",
        f"  %gs3 = fmul {f} {t} %g3, %s3", f"  %a = fsub {f} {t} %gs3, %mean_g",
        f"  %nm = fmul {f} {t} %n3, %mean_gn", f"  %b = fsub {f} {t} %a, %nm", f"  %gx3 = fmul {f} {t} %inverse, %b",
        f"  %gx3.at = getelementptr {t}, ptr %g_x, i64 %c3", f"  store {t} %gx3, ptr %gx3.at",
        "  %c3.next = add i64 %c3, 1", "  %more3 = icmp slt i64 %c3.next, %columns",
        "  br i1 %more3, label %gx, label %gx.end",
        "gx.end:", "  %r.next = add i64 %r, 1", "  %rows.more = icmp slt i64 %r.next, %r1",
        "  br i1 %rows.more, label %row, label %cast",
        "cast:", "  %k = phi i64 [0, %gx.end], [%k.next, %cast]",
        "  %ks.at = getelementptr double, ptr %pg_scale, i64 %k", "  %ks = load double, ptr %ks.at",
        "  %kh.at = getelementptr double, ptr %pg_shift, i64 %k", "  %kh = load double, ptr %kh.at",
        narrow("%ks", "%ks.t"), narrow("%kh", "%kh.t"),
        f"  %ks.t.at = getelementptr {t}, ptr %pg_scale.t, i64 %k", f"  store {t} %ks.t, ptr %ks.t.at",
        f"  %kh.t.at = getelementptr {t}, ptr %pg_shift.t, i64 %k", f"  store {t} %kh.t, ptr %kh.t.at",
        "  %k.next = add i64 %k, 1", "  %k.more = icmp slt i64 %k.next, %columns",
        "  br i1 %k.more, label %cast, label %done", "done:", "  ret void", "}"]


def kernel_ir(name: str, float_type: str) -> str:
    """The LLVM IR of the ``"forward"`` or ``"backward"`` kernel for ``float_type`` (rows of at
    least one column).

    >>> "define void @minflux_layer_norm(" in kernel_ir("forward", "float32")
    True
    """
    t = {"float32": "float", "float64": "double"}[float_type]
    lines = (_forward if name == "forward" else _backward)(t, _FLAGS)
    return f"; a minflux layer-norm row kernel ({name}, {float_type})\n" + "\n".join(lines) + "\n"


_lock = threading.Lock()


@functools.cache
def _kernels(dtype: np.dtype):
    from ..runtime.kernel_loader import load_ir_kernel

    with _lock:   # keyed by the dtype itself: its .name costs 1.7 us, more than a small kernel's call
        return tuple(load_ir_kernel(kernel_ir(name, dtype.name), "minflux_layer_norm", n)
                     for name, n in (("forward", 7), ("backward", 8)))


def forward(x, scale, shift, eps_box, out, normalised, reciprocal) -> None:
    """Normalise the rows of contiguous ``x`` (rows, columns) into ``out``, keeping ``normalised``
    and the reciprocal deviations (``reciprocal``, one per row) for the backward pass; ``eps_box``
    is a float64 array holding epsilon."""
    if x.shape[0]:
        kernel, integers, addresses = _arguments(0, (x, scale, shift, eps_box, out, normalised, reciprocal))
        kernel.call(*integers, *addresses)


def backward(g, normalised, reciprocal, scale, g_x, sums, g_scale, g_shift) -> None:
    """The input gradient into ``g_x`` and the parameters' into ``g_scale`` and ``g_shift`` (all of
    ``g``'s dtype), summed in float64 in ``sums`` (2 x columns)."""
    if g.shape[0]:
        kernel, integers, addresses = _arguments(1, (g, normalised, reciprocal, scale, g_x, sums, g_scale, g_shift))
        kernel.call(*integers, *addresses)
    else:
        g_scale[...], g_shift[...] = 0, 0


def command(which: str, arrays: tuple, held: tuple) -> Command:
    """The native command (`minflux.runtime.native_runner`) of `forward` (``which="forward"``) or
    `backward` on ``arrays`` (contiguous, at least one row), keeping ``held`` alive with it.

    >>> x, p, box = np.ones((2, 3)), np.ones(3), np.array([1e-5])
    >>> outs = np.empty((2, 3)), np.empty((2, 3)), np.empty(2)
    >>> words = command("forward", (x, p, p, box, *outs), (box,)).words
    >>> words[2:8], len(words)            # 12 arguments: the row range, columns, size, rows; 7 arrays
    ([12, 0, 2, 3, 6, 2], 15)
    """
    kernel, integers, addresses = _arguments(("forward", "backward").index(which), arrays)
    return kernel_words(function_address(kernel.call), integers, addresses)._replace(held=held)


def _arguments(which: int, arrays: tuple) -> tuple:
    rows, columns = arrays[0].shape
    return _kernels(arrays[0].dtype)[which], [0, rows, columns, rows * columns, rows], pointers(arrays)


def usable(*arrays) -> bool:
    """True when the row kernels apply: the numba elementwise backend is selected, every array is a
    numpy float32/float64 array of one dtype, and the rows are not empty."""
    dtype = arrays[0].dtype
    return (get_elementwise_backend() == "numba" and arrays[0].ndim > 0 and arrays[0].shape[-1] > 0
            and all(is_numpy_array(a) and a.dtype == dtype and dtype in (np.float32, np.float64)
                    for a in arrays))
