"""The forward-mode transform: constant partials fold, zero partials vanish, branches merge correctly."""
from __future__ import annotations

import numpy as np
import pytest

from minflux.compiler.dual import differentiate
from minflux.compiler.frontend import parse
from minflux.compiler.ir import Assign, Call, walk
from minflux.compiler.kinds import infer_kinds
from minflux.compiler.numpy_backend import ArrayOps, evaluate


def dual(fn, kinds, wrt):
    return differentiate(infer_kinds(parse(fn).function, list(kinds)), list(wrt))


def run(d, *args):
    outs = evaluate(d.function, [np.asarray(a, float) for a in args], ArrayOps(np, np.float64))
    return [np.broadcast_to(o, np.broadcast_shapes(*[np.shape(a) for a in args])) for o in outs]


def test_constant_partials_are_folded_and_never_materialised():
    d = dual(lambda x, y: (x + 1, 2 * y - 3 * x, y * 0 + 5.0), "ff", [0, 1])
    assert d.slots == []
    assert d.constants == {(0, 0): 1.0, (1, 0): -3.0, (1, 1): 2.0}
    assert d.function.n_outputs == 3


def test_partial_constant_on_every_return_is_folded_across_branches():
    def f(x, c):
        if c > 0:
            return x + 1
        return x - 5
    d = dual(f, "ff", [0, 1])
    assert d.slots == [] and d.constants == {(0, 0): 1.0}


def test_partial_that_differs_between_branches_is_materialised():
    def f(x, c):
        if c > 0:
            return x * 3
        return x
    d = dual(f, "ff", [0])
    assert d.slots == [(0, 0)]
    _, dx = run(d, [1.0, 1.0], [1.0, -1.0])
    np.testing.assert_array_equal(dx, [3.0, 1.0])


def test_untracked_inputs_carry_no_partials():
    d = dual(lambda x, y: x * y, "ff", [1])
    assert d.slots == [(0, 1)]
    calls = [s.value.op for s in walk(d.function.body) if isinstance(s, Assign) and isinstance(s.value, Call)]
    assert calls == ["multiply"]   # d/dy = x is a copy, no arithmetic for x's partial


def test_integer_parameters_are_never_differentiated():
    d = dual(lambda x, n: x * n, "fi", [0, 1])
    assert d.wrt == (0,) and [k for _, k in d.slots] == [0]


def test_branch_condition_uses_primal_values_only():
    # x * x == 4 is true at x = 2 although the partial 2x is nonzero: the branch sees the value only
    def f(x):
        if x * x == 4:
            return x * 10
        return x
    _, dx = run(dual(f, "f", [0]), [2.0, 3.0])
    np.testing.assert_array_equal(dx, [10.0, 1.0])


def test_loop_carried_partials_merge_at_the_header():
    def power(x, n):
        y = 1.0
        k = 0
        while k < n:
            y = y * x
            k += 1
        return y
    d = dual(power, "fi", [0])
    x, n = np.array([1.5, 2.0, 3.0]), np.array([0, 1, 3])
    outs = evaluate(d.function, [x, n], ArrayOps(np, np.float64))
    np.testing.assert_allclose(outs[0], x ** n)
    np.testing.assert_array_equal(outs[1], 0)          # the while loop's iteration-cap flag
    np.testing.assert_allclose(outs[d.n_outputs], n * x ** (n - 1.0))


def test_reassigned_operand_does_not_change_an_earlier_partial():
    def f(x, y):
        a = x
        b = a * y        # db/dy = a at this point
        a = a + 10       # a changes afterwards
        return b + a * 0
    _, _, dy = run(dual(f, "ff", [0, 1]), [2.0], [3.0])
    np.testing.assert_array_equal(dy, [2.0])


@pytest.mark.parametrize("x", [-1.0, 0.0, 1.0])
def test_table_rules_at_kinks(x):
    """relu'(0) = 0, abs'(0) = 0, max ties go to the first argument: the table's conventions."""
    d = dual(lambda x: (max(x, 0.0), abs(x)), "f", [0])
    _, _, d_relu, d_abs = run(d, [x])
    assert d_relu[0] == (1.0 if x >= 0 else 0.0)
    assert d_abs[0] == np.sign(x)
