"""Random array programs for the differential test of native replays against eager execution.

`make_program(seed)` draws a function of one to three arrays (float32 or float64, C or Fortran order or
strided, with zeros of both signs, infinities, NaNs and subnormals among their values at some calls)
that chains numpy and minflux operations: elements of arrays read as numpy scalars, in-place writes,
reductions, integer casts, boolean masks, contractions, views, elementwise functions with branches and
with loops (kernels that run in row chunks) and gradients through them. `Program.run(calls)` calls it
compiled and eagerly on twins of the same inputs, under one numpy error state, and returns the first
difference in words (results with their types, warnings, exceptions), or None. A NaN met by a NaN may
keep either one's payload in either form, so NaNs compare as NaNs; numpy names a float scalar's
operation "scalar divide" where the replay's ufunc says "divide", so messages compare without "scalar ".

>>> make_program(0).run(calls=3) is None
True
"""
from __future__ import annotations

import dataclasses
import warnings

import numpy as np

import minflux as mf


def halved_while_above(x, y):
    n = 0
    while x > y and n < 3:
        x = x * 0.5
        n += 1
    return x + n, x * y


def kink(x, y):
    if x > 0:
        return x * y
    return -x


def _like(a, b):
    return b if a.shape == b.shape else a


OPERATIONS = {
    "element": lambda a, b, u: b * a[tuple(int(u * n) for n in a.shape)] if a.ndim else a * 2.0,
    "row": lambda a, b, u: a[int(u * a.shape[0])] if a.ndim else a,
    "in place": lambda a, b, u: _written(a * 1.0, b),
    "clip": lambda a, b, u: np.clip(a, -0.5, 0.75),
    "where": lambda a, b, u: np.where(a > 0.1, a, 0.0),
    "reductions": lambda a, b, u: a.sum(axis=0, keepdims=True) + a.max() if a.ndim else a,
    "cumulative sum": lambda a, b, u: np.cumsum(a, axis=0) if a.ndim else a,
    "integers": lambda a, b, u: (np.floor(a * 3).astype(np.int64) * 2 + 1).astype(a.dtype) + a,
    "mask": lambda a, b, u: ((a > 0) & (_like(a, b) < 0.5)) * a + (a > 0).astype(a.dtype),
    "contraction": lambda a, b, u: np.einsum("ij,kj->ik", a, a) if a.ndim == 2 else a * a,
    "dot": lambda a, b, u: a.reshape(-1) @ a.reshape(-1) + a,
    "contiguous": lambda a, b, u: np.ascontiguousarray(a.T) * 1.5 if a.ndim == 2 else a.copy(),
    "views": lambda a, b, u: np.squeeze(np.expand_dims(a, 0), 0) * a.ravel().reshape(a.shape),
    "norm": lambda a, b, u: a / (np.linalg.norm(a) + 1.0),
    "argmax": lambda a, b, u: np.argmax(a, axis=-1).astype(a.dtype) + a.max(axis=-1) if a.ndim else a,
    "scalar of a sum": lambda a, b, u: b * a.sum() + a.sum(),
    "remainders": lambda a, b, u: np.mod(a, 0.7) + np.floor_divide(a, 0.3),
    "minima": lambda a, b, u: np.fmin(a, _like(a, b)) - np.maximum(a, 0.0),
    "kernel with a loop": lambda a, b, u: np.subtract(*mf.broadcast(halved_while_above, a, _like(a, b))),
    "kernel with a branch": lambda a, b, u: mf.broadcast(kink, a, _like(a, b)),
    "gradient through a loop": lambda a, b, u: mf.gradient(
        lambda t: mf.sum(mf.broadcast(halved_while_above, t, _like(a, b))[0] * mf.tanh(t)), a)[0],
    "gradient through a branch": lambda a, b, u: _weighted(*mf.withgradient(
        lambda s, t: mf.sum(mf.broadcast(kink, s, t) * s), a, _like(a, b))),
}


def _written(c, b):
    if c.ndim:
        c[0] = b.reshape(-1)[0] if b.size else 0.0
        c[..., -1] += 1.0
    return c


def _weighted(value, grads):
    return grads[0] * value + grads[1]


def chained(ops: tuple):
    """The function applying ``ops`` (names of `OPERATIONS` with the draws choosing their operands)
    in turn to a pool of its arguments and the results so far; it returns the last three."""
    def program(*xs):
        pool = list(xs)
        for name, (first, second, u) in ops:
            pool.append(OPERATIONS[name](pool[int(first * len(pool))], pool[int(second * len(pool))], u))
        return tuple(pool[-3:])
    return program


@dataclasses.dataclass
class Program:
    """One random function (`chained` of ``ops``) and the inputs it is called with."""

    seed: int
    ops: tuple
    layouts: list
    errors: str

    def inputs(self, rng, special: bool) -> list:
        arrays = []
        for shape, dtype, order in self.layouts:
            x = rng.standard_normal(shape).astype(dtype)
            if special:
                flat = x.reshape(-1)
                hit = rng.random(flat.size) < 0.15
                flat[hit] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 2.0], hit.sum())
            arrays.append(_laid_out(x, order))
        return arrays

    def run(self, calls: int = 75) -> str | None:
        """The first call at which the compiled function and the eager one differ, in words, or None."""
        eager = chained(self.ops)
        rng, compiled = np.random.default_rng(self.seed), mf.compile(eager)
        for k in range(calls):
            xs = self.inputs(rng, special=k > 0)   # the recording's call has ordinary values
            outcomes = [_outcome(fn, [_laid_out(x.copy(), order) for x, (_, _, order) in zip(xs, self.layouts)],
                                 self.errors) for fn in (eager, compiled)]
            if k == 0 and outcomes[0][0][0] == "raised":
                return None   # nothing to record
            if outcomes[0] != outcomes[1]:
                return (f"seed {self.seed} ({[name for name, _ in self.ops]}, {self.layouts}, errors "
                        f"{self.errors}), call {k}: eager {outcomes[0]!r:.300} against compiled {outcomes[1]!r:.300}")
        return None


def _laid_out(x: np.ndarray, order: str) -> np.ndarray:
    if order == "F":
        return np.asfortranarray(x)
    if order == "strided":
        every_other = np.zeros((x.shape[0] * 2,) + x.shape[1:], x.dtype)
        every_other[::2] = x
        return every_other[::2]
    return np.ascontiguousarray(x)


def _outcome(fn, args, errors: str):
    with warnings.catch_warnings(record=True) as caught, np.errstate(all=errors):
        warnings.simplefilter("always")
        try:
            result = ("returned", [_bits(r) for r in fn(*args)])
        except (ArithmeticError, ValueError, TypeError) as error:   # numpy's error state, a bad operand
            result = ("raised", type(error).__name__, str(error).replace("scalar ", ""))
    return result, sorted(str(w.message).replace("scalar ", "") for w in caught), [_bits(a) for a in args]


def _bits(x):
    kind, x = type(x).__name__, np.asarray(x)
    if x.dtype.kind == "f":
        x = np.where(np.isnan(x), np.array(np.nan, x.dtype), x)
    return kind, x.dtype.str, x.shape, x.tobytes()


def make_program(seed: int) -> Program:
    """The random program of ``seed`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 6, size=int(rng.choice([1, 2, 2, 2, 3]))))
    dtype = rng.choice([np.float32, np.float64])
    layouts = [(shape, dtype, str(rng.choice(["C", "C", "F", "strided"]) if len(shape) > 1 else "C"))
               for _ in range(int(rng.integers(1, 4)))]
    names = list(OPERATIONS)
    ops = tuple((names[int(rng.integers(len(names)))], tuple(float(u) for u in rng.random(3)))
                for _ in range(int(rng.integers(1, 9))))
    return Program(seed, ops, layouts, str(rng.choice(["ignore", "warn", "raise"])))
