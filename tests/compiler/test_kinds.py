"""Kind inference: every variable gets one kind and every conversion is an explicit call."""
from __future__ import annotations

import pytest

from minflux.compiler.frontend import parse
from minflux.compiler.ir import Call, format_function, walk
from minflux.compiler.kinds import infer_kinds


def typed(fn, kinds):
    return infer_kinds(parse(fn).function, kinds)


def calls(fn) -> list:
    return [s.value for s in walk(fn.body) if hasattr(s, "value") and isinstance(s.value, Call)]


def test_int_times_float_converts_the_int_explicitly():
    f = typed(lambda n, x: n * x, ["i", "f"])
    (conversion, product) = calls(f)
    assert conversion.op == "float" and conversion.args[0].name == "v_n"
    assert product.op == "multiply" and all(f.kinds[a.name] == "f" for a in product.args)
    assert f.output_kinds == ["f"]


def test_int_arithmetic_stays_int_and_comparisons_are_bool():
    f = typed(lambda n, m: (n + m, n < m), ["i", "i"])
    assert f.output_kinds == ["i", "b"]


def test_a_variable_assigned_int_and_float_on_two_paths_is_float():
    def f(x, n):
        y = n
        if x > 0:
            y = x
        return y

    t = typed(f, ["f", "i"])
    assert t.output_kinds == ["f"]
    assert "float(" in format_function(t)


def test_returns_of_different_kinds_join():
    def f(x, n):
        if x > 0:
            return n
        return x

    assert typed(f, ["f", "i"]).output_kinds == ["f"]


def test_a_float_condition_becomes_a_bool():
    def f(x):
        if x:
            return 1.0
        return 2.0

    t = typed(f, ["f"])
    conditions = [s.cond for s in walk(t.body) if hasattr(s, "cond")]
    assert all(t.kinds[c.name] == "b" for c in conditions if hasattr(c, "name"))


def test_wrong_number_of_parameter_kinds_is_an_error():
    with pytest.raises(ValueError, match="2 parameters but 1 kinds"):
        typed(lambda x, y: x + y, ["f"])
