"""Random training steps for the differential test of `mf.compile` against eager execution.

`make_program(seed)` draws one step function and everything it needs: a small model, an optimiser,
a sequence of layers, activations (elementwise functions with branches among them), structural ops
and in-place writes, and the things outside the arguments a step reads -- a closure's settings, a
module global, numpy's error state -- together with a schedule of how they change from call to call
and of the layouts the inputs arrive in. `Program.run(compiled, calls)` calls the compiled step and
the same step run eagerly on twin copies of the state and returns the first difference in words, or
None when every result and every array of the state agreed to the bit on every call.

>>> program = make_program(0)
>>> program.run(calls=3) is None
True
"""
from __future__ import annotations

import copy
import dataclasses
import warnings
from typing import Callable

import numpy as np

import minflux as mf

PENALTY = 1e-3
"""A module global the steps read: the programs change it while they run."""


@mf.elementwise
def leaky_branch(x, slope):
    if x > 0.0:
        return x
    elif x > -1.0:
        return slope * x
    return slope * (2.0 * x + 1.0)


@mf.elementwise
def soft_clip(x):
    y = x
    if x > 2.0:
        y = 2.0 + mf.log1p(x - 2.0)
    return y


ACTIVATIONS: dict[str, Callable] = {
    "tanh": mf.tanh, "sigmoid": mf.sigmoid, "relu": mf.relu, "softplus": mf.softplus,
    "leaky_branch": lambda h: leaky_branch(h, 0.1), "soft_clip": soft_clip,
    "where": lambda h: mf.where(h > 0, h, h * 0.2),
}
STRUCTURAL: dict[str, Callable] = {
    "concat_slice": lambda h: mf.concatenate([h, h * 0.5], axis=1)[:, : h.shape[1]],
    "stack_mean": lambda h: mf.mean(mf.stack([h, mf.tanh(h)]), axis=0),
    "transpose_twice": lambda h: mf.transpose(mf.transpose(h) * 1.5),
    "reshape": lambda h: mf.reshape(mf.reshape(h, (-1,)) + 0.25, h.shape),
    "row_centre": lambda h: h - mf.mean(h, axis=0, keepdims=True),
}
RULES: dict[str, Callable] = {
    "descent": lambda: mf.optim.Descent(0.05), "momentum": lambda: mf.optim.Momentum(0.02, 0.9),
    "adam": lambda: mf.optim.Adam(0.01), "clipped_adam": lambda: mf.optim.chain(mf.optim.ClipNorm(1.0),
                                                                                  mf.optim.Adam(0.01)),
}
LAYOUTS = ("c", "fortran", "transposed", "strided")


def _laid_out(x: np.ndarray, layout: str) -> np.ndarray:
    if layout == "fortran":
        return np.asfortranarray(x)
    if layout == "transposed":
        return np.ascontiguousarray(x.T).T
    if layout == "strided":
        wide = np.zeros((x.shape[0], 2 * x.shape[1]), x.dtype)
        wide[:, ::2] = x
        return wide[:, ::2]
    return x


def same(a, b) -> bool:
    """Whether ``a`` and ``b`` are arrays of one dtype and shape with the same bytes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


@dataclasses.dataclass
class Program:
    """One random step: ``step(model, opt_state, counters, x, y)`` and what changes between calls."""

    seed: int
    step: Callable
    settings: dict
    model: dict
    rule: str
    layouts: tuple
    dtype: type
    batch: int
    sizes: tuple
    description: str

    def run(self, calls: int = 72, compiled: Callable | None = None) -> str | None:
        global PENALTY
        compiled = compiled or mf.compile(self.step, warn_after=10**6, max_entries=64)
        states = []
        for _ in range(2):
            model = copy.deepcopy(self.model)
            states.append([model, mf.optim.setup(RULES[self.rule](), model),
                           {"count": np.zeros((), np.int64), "total": np.zeros(1, self.dtype)}])
        data = np.random.default_rng(self.seed + 1)
        saved_penalty = PENALTY
        try:
            for call in range(calls):
                self.settings["scale"] = 1.0 + (call // 9 % 3) * 0.5    # a closure's setting changes
                PENALTY = (1e-3, 0.0, -0.0, 2e-3)[call // 13 % 4]       # and a module global
                errors = ("ignore", "warn")[call // 17 % 2]             # and numpy's error state
                x = data.normal(size=(self.batch, self.sizes[0])).astype(self.dtype)
                y = data.normal(size=(self.batch, self.sizes[-1])).astype(self.dtype)
                x = _laid_out(x, self.layouts[call % len(self.layouts)])
                results = []
                for fn, state in ((compiled, states[0]), (self.step, states[1])):
                    with np.errstate(over=errors, under="ignore"), warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        results.append(fn(*state, x, y))
                why = _difference(results[0], results[1], "the result") or _difference(
                    states[0], states[1], "the state")
                if why:
                    return f"program {self.seed} ({self.description}), call {call}: {why}"
        finally:
            PENALTY = saved_penalty
        return None


def _difference(a, b, what: str) -> str | None:
    la = list(mf.tree.named_leaves(a, trainable_only=False))
    lb = list(mf.tree.named_leaves(b, trainable_only=False))
    if [n for n, _ in la] != [n for n, _ in lb]:
        return f"{what} has another structure"
    for (name, u), (_, v) in zip(la, lb):
        if not same(u, v):
            return f"{what} differs at {name or 'the value'}: compiled {np.asarray(u)!r}, eager {np.asarray(v)!r}"
    return None


def make_program(seed: int) -> Program:
    """Draw program ``seed`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    dtype = (np.float64, np.float32)[int(rng.integers(2))]
    sizes = tuple(int(n) for n in rng.integers(2, 9, size=3))
    batch = int(rng.integers(1, 6))
    layers = [str(rng.choice(list(ACTIVATIONS))) for _ in range(int(rng.integers(1, 4)))]
    shapes = [str(rng.choice(list(STRUCTURAL))) for _ in range(int(rng.integers(0, 3)))]
    rule = str(rng.choice(list(RULES)))
    layouts = tuple(rng.choice(LAYOUTS, size=int(rng.integers(1, 3)), replace=False).tolist())
    in_place = bool(rng.integers(2))
    model = {"w1": (rng.normal(size=sizes[:2]) * 0.5).astype(dtype), "b1": np.zeros(sizes[1], dtype),
             "w2": (rng.normal(size=sizes[1:]) * 0.5).astype(dtype)}
    settings = {"scale": 1.0}
    activations = [ACTIVATIONS[name] for name in layers]
    structural = [STRUCTURAL[name] for name in shapes]

    def loss(m, x, y):
        h = x @ m["w1"] + m["b1"]
        for activation in activations:
            h = activation(h)
        for op in structural:
            h = op(h)
        out = h @ m["w2"]
        return mf.mean((out - y) ** 2) * settings["scale"] + PENALTY * mf.sum(m["w1"] * m["w1"]), out

    def step(model, opt_state, counters, x, y):
        (value, out), (grads,) = mf.withgradient(lambda m: loss(m, x, y), model)
        mf.optim.update(opt_state, model, grads)
        if in_place:
            counters["count"] += 1
        counters["total"] = counters["total"] + value
        return value, out

    description = (f"{np.dtype(dtype).name}, sizes {sizes}, batch {batch}, layers {layers}, ops {shapes}, "
                   f"{rule}, layouts {layouts}{', in-place counter' if in_place else ''}")
    return Program(seed, step, settings, model, rule, layouts, dtype, batch, sizes, description)
