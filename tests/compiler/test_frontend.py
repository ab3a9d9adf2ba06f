"""The frontend: every unsupported construct raises CompileError naming file, line, construct and fix;
constants are compile-time values that recompile when they change; lambdas are found in their line."""
from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import minflux as mf
from minflux.compiler.frontend import parse
from minflux.compiler.ir import If, Loop, Return, format_function, walk

LIMIT = 2.0
GLOBAL_ARRAY = np.ones(3)


def _line(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    for offset, line in enumerate(lines):
        if marker in line:
            return start + offset
    raise AssertionError(f"marker {marker!r} not in the source of {fn.__name__}")


def list_value(x):
    return [x]  # marker


def subscript(x):
    return x[0]  # marker


def attribute_of_value(x):
    return x.real  # marker


def unknown_function(x):
    return np.exp(x)  # marker


def try_statement(x):
    try:  # marker
        return x
    except ValueError:
        return 0.0


def global_statement(x):
    global LIMIT  # marker
    LIMIT = x
    return x


def recursion(x):
    if x > 1:
        return recursion(x - 1)  # marker
    return x


def global_array(x):
    return x * GLOBAL_ARRAY  # marker


def unknown_name(x):
    return x * not_defined_anywhere  # noqa: F821  marker


def missing_return(x):
    if x > 0:  # marker
        return x


def different_output_counts(x):
    if x > 0:
        return x, x  # marker
    return x


def bitwise_operator(x, y):
    return x & y  # marker


def for_over_list(x):
    for k in [1, 2]:  # marker
        x = x + k
    return x


def float_range(x):
    s = 0.0
    for k in range(x):  # marker
        s += 1
    return s


def keyword_call(x):
    return max(x, 0.0, key=abs)  # marker


def string_constant(x):
    return "x"  # marker


def default_argument(x, y=1.0):  # marker
    return x + y


def comprehension(x):
    return sum([x for _ in range(3)])  # marker


def is_comparison(x):
    return x is None  # marker


def int_call(x):
    return int(x)  # marker


def while_else(x):
    while x > 1:  # marker
        x = x / 2
    else:
        x = 0.0
    return x


ERROR_CASES = [
    (list_value, ("f",), "a list", "return a tuple"),
    (subscript, ("f",), "indexing", "pass the element"),
    (attribute_of_value, ("f",), "attribute .real of a value", "mf.* or math.*"),
    (unknown_function, ("f",), "a call to np.exp", "call math.*, mf.*"),
    (try_statement, ("f",), "try", "kernels cannot raise"),
    (global_statement, ("f",), "assignment to a global", "return the value"),
    (recursion, ("f",), "recursion", "while loop"),
    (global_array, ("f",), "'GLOBAL_ARRAY' (a ndarray)", "pass arrays as arguments"),
    (unknown_name, ("f",), "'not_defined_anywhere' is not defined", None),
    (missing_return, ("f",), "without a return", "add a final return"),
    (different_output_counts, ("f",), "different numbers of outputs", "same number of values"),
    (bitwise_operator, ("f", "f"), "the operator BitAnd", "`and`/`or`"),
    (for_over_list, ("f",), "a for loop over anything but range()", "for k in range(n)"),
    (float_range, ("f",), "range() got a float", "range needs integers"),
    (keyword_call, ("f",), "keyword arguments", "by position"),
    (string_constant, ("f",), "a str constant", "numbers only"),
    (default_argument, ("f", "f"), "defaults", "pass every argument"),
    (comprehension, ("f",), "a list comprehension", "for loop over range()"),
    (is_comparison, ("f",), "the comparison Is", "< <= > >= == !="),
    (int_call, ("f",), "int()", "math.floor"),
    (while_else, ("f",), "while ... else", "set a flag"),
]


@pytest.mark.parametrize("fn, kinds, construct, fix", ERROR_CASES, ids=[c[0].__name__ for c in ERROR_CASES])
def test_compile_error_names_file_line_construct_and_fix(fn, kinds, construct, fix):
    args = [np.array([1.5, 2.5]) if k == "f" else np.array([1, 2]) for k in kinds]
    with pytest.raises(mf.CompileError) as info:
        mf.broadcast(fn, *args, mode="mixed")
    message = str(info.value)
    assert message.startswith(f"{__file__}:{_line(fn, 'marker')}: "), message
    assert construct in message
    if fix is not None:
        assert fix in message


def test_compile_error_for_source_that_is_not_available():
    namespace: dict = {}
    exec("def f(x):\n    return x\n", namespace)
    with pytest.raises(mf.CompileError, match="source of f is not available.*linecache"):
        mf.broadcast(namespace["f"], np.ones(2))


def test_exec_code_with_registered_source_compiles():
    import linecache
    src = "def g(x):\n    return x * 3\n"
    name = "<minflux-test-exec>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    namespace: dict = {}
    exec(compile(src, name, "exec"), namespace)
    np.testing.assert_array_equal(mf.broadcast(namespace["g"], np.ones(2)), [3.0, 3.0])


def test_constants_are_read_at_compile_time_and_recompile_when_changed():
    def scaled(x):
        return x * LIMIT
    global LIMIT
    before = LIMIT
    try:
        np.testing.assert_array_equal(mf.broadcast(scaled, np.ones(2)), [2.0, 2.0])
        LIMIT = 5.0
        np.testing.assert_array_equal(mf.broadcast(scaled, np.ones(2)), [5.0, 5.0])
    finally:
        LIMIT = before


def test_closure_constant_changes_recompile():
    def make(k):
        return lambda x: x + k
    np.testing.assert_array_equal(mf.broadcast(make(1.0), np.zeros(1)), [1.0])
    np.testing.assert_array_equal(mf.broadcast(make(7.0), np.zeros(1)), [7.0])


def test_lambdas_on_one_line_are_told_apart():
    x = np.array([4.0])
    pair = (lambda x: x + 1, lambda x: x * 10)  # same parameters, same line
    assert mf.broadcast(pair[0], x)[0] == 5.0
    assert mf.broadcast(pair[1], x)[0] == 40.0
    inner = mf.gradient(lambda x: mf.sum(mf.broadcast(lambda x: x * x * x, x)), x)[0]
    assert inner[0] == 48.0


def test_math_constants_and_module_attributes():
    fn = parse(lambda x: x * math.pi + math.e).function
    text = format_function(fn)
    assert repr(math.pi) in text and repr(math.e) in text


def test_control_flow_becomes_structured_ir():
    def f(x, n):
        s = 0.0
        for k in range(n):
            if k == 2:
                continue
            s += x
        while s > 10:
            s = s / 2
        return s
    fn = parse(f).function
    loops = [s for s in walk(fn.body) if isinstance(s, Loop)]
    assert len(loops) == 2
    assert loops[0].latch  # the for loop's counter increment runs on continue too
    assert any(isinstance(s, If) for s in walk(fn.body))
    assert isinstance(fn.body[-1], Return)


def test_chained_comparison_evaluates_the_middle_once_and_short_circuits():
    @mf.elementwise
    def inside(x):
        return 1.0 if 0 < x * 2 <= 3 else 0.0
    np.testing.assert_array_equal(inside(np.array([-1.0, 0.5, 1.5, 2.0])), [0.0, 1.0, 1.0, 0.0])
