"""Scalar functions that exercise every construct of the scalar-function compiler's language.

Each `Case` names a function, the kinds of its arguments and how to draw inputs; the test suites of
every backend (numpy, numba, CUDA C) run the same cases. Inputs are drawn away from branch switch
points and kinks so that central finite differences are meaningful.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

import minflux as mf

SCALE = 1.5          # a module-level constant read by `uses_global`
STEPS = 3


@mf.elementwise
def arithmetic(x, y):
    return (x * y - x / (1 + y * y) + x ** 2 // 1 * 0 + (x % 1.5) - -y) * 0.5


@mf.elementwise
def transcendental(x, y):
    return (mf.tanh(x) + mf.sigmoid(y) + mf.exp(0.3 * x) + mf.log(1 + y * y) + mf.sqrt(1 + x * x)
            + math.sin(x) * math.cos(y) + mf.softplus(x) + mf.log1p(y * y) + mf.expm1(0.1 * x))


@mf.elementwise
def math_functions(x, y):
    return (math.tan(0.3 * x) + math.atan(y) + math.sinh(0.5 * x) + math.cosh(0.2 * y)
            + math.log2(2 + x * x) + math.log10(3 + y * y) + math.atan2(y, 2 + x * x)
            + math.hypot(x, y) + math.asinh(x) + math.pow(1 + y * y, 0.7) + math.log(2 + x * x, 3)
            + math.pi * math.e)


@mf.elementwise
def builtins_and_selection(x, y):
    return abs(x) + min(x, y, 0.5) + max(x, -y) + mf.relu(y) + mf.clip(x, -0.5, 0.5) + \
        mf.where(x > y, x * y, -y) + mf.maximum(x, 0.2) - mf.minimum(y, 0.1) + float(x > 0)


@mf.elementwise
def branches(x, y):
    if x > 0.5:
        r = x * y
    elif x < -0.5:
        r = mf.tanh(y) - x
    else:
        if y > 0:
            r = y * y
        else:
            r = -y
    return r + 1


@mf.elementwise
def early_returns(x, y):
    if x < -0.5:
        return x * y
    t = mf.exp(0.5 * y)
    if y > 0.5:
        if x > 0.5:
            return t * x
        return t - x
    return t * t


@mf.elementwise
def conditional_expression(x, y):
    a = x if x < 0 else mf.sqrt(x)
    return a * (y if y > x else 2 * y)


@mf.elementwise
def boolean_logic(x, y):
    if (x > 0 and y > 0) or not (x > -0.5):
        return x * y
    if -0.5 < x < 0.5 <= y + 1:
        return x + y
    return x - y


@mf.elementwise
def while_loop(x, y):
    s = x
    k = 0
    while s < 3.0:
        s = s * 1.5 + y * y + 0.25
        k = k + 1
    return s * k


@mf.elementwise
def for_loop_with_break_continue(x, y, n):
    acc = 0.0
    for k in range(n):
        if k == 1:
            continue
        acc = acc * x + mf.tanh(y * k)
        if acc > 4.0:
            break
    return acc


@mf.elementwise
def augmented_and_unpacking(x, y):
    a, b = x, y
    a, b = b, a
    a += 1
    b *= a
    b -= x / 4
    a /= 2
    c = d = a * b
    return c + d


@mf.elementwise
def two_outputs(x, y):
    if x > 0:
        return x * y, x + y
    return x - y, y * y


@mf.elementwise
def helper(u, v):
    if u > 0.5:
        return u * v
    return v - u


@mf.elementwise
def helper_pair(u):
    if u < 0:
        return -u, u * u
    return u, 2 * u


@mf.elementwise
def inlines_elementwise(x, y):
    a, b = helper_pair(x)
    return helper(x, y) * a + b


@mf.elementwise
def uses_global(x, y):
    r = x
    for k in range(STEPS):
        r = r * SCALE - y
    return r


@mf.elementwise
def int_and_bool_inputs(x, n, flag):
    if flag:
        return x * n
    return x / (1 + n)


@mf.elementwise
def loop_with_early_return(x, y):
    k = 0
    while k < 5:
        if x * k > 2.0:
            return x * y * k
        k += 1
    return y - x


@mf.elementwise
def constant_partials(x, y):
    return x + 1, 2 * y - 3 * x, y * 0 + 5.0


@dataclass
class Case:
    """A test function and how to draw its inputs: one ``(kind, low, high)`` per argument."""

    fn: Callable
    args: tuple

    @property
    def name(self) -> str:
        return self.fn.__name__

    def draw(self, rng: np.random.Generator, shape=(5, 4), dtype=np.float64) -> list:
        out = []
        for kind, lo, hi in self.args:
            if kind == "f":
                v = rng.uniform(lo, hi, shape)
                # keep away from branch points at 0, +-0.5 and 1 so finite differences are valid
                for point in (-1.0, -0.5, 0.0, 0.5, 1.0):
                    near = np.abs(v - point) < 0.03
                    v[near] += 0.06
                out.append(v.astype(dtype))
            elif kind == "i":
                out.append(rng.integers(lo, hi, shape[:1] + (1,)).astype(np.int64))
            else:
                out.append(rng.random(shape) < 0.5)
        return out


F = ("f", -1.5, 1.5)
CASES = [
    Case(arithmetic, (F, F)),
    Case(transcendental, (F, F)),
    Case(math_functions, (("f", 0.1, 1.5), ("f", 0.1, 1.5))),
    Case(builtins_and_selection, (F, F)),
    Case(branches, (F, F)),
    Case(early_returns, (F, F)),
    Case(conditional_expression, (F, F)),
    Case(boolean_logic, (F, F)),
    Case(while_loop, (("f", 0.2, 1.0), F)),
    Case(for_loop_with_break_continue, (F, F, ("i", 0, 5))),
    Case(augmented_and_unpacking, (F, F)),
    Case(two_outputs, (F, F)),
    Case(inlines_elementwise, (F, F)),
    Case(uses_global, (F, F)),
    Case(int_and_bool_inputs, (F, ("i", 0, 4), ("b", 0, 1))),
    Case(loop_with_early_return, (("f", 0.1, 1.5), F)),
    Case(constant_partials, (F, F)),
]
