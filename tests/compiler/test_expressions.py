"""Scalar functions built from expressions: the same values and partials as the same function written
as Python source, checked against numpy formulas and float64 finite differences; one structure, one
compiled function; arguments classified once; one clear line for each kind of bad input."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import arguments, expressions
from minflux.compiler import CompiledFunction, compiled, prepare
from minflux.compiler.expressions import FunctionBuilder, argument, constant
from minflux.compiler.ir import format_function
from minflux.compiler.rules import TABLE, define
from minflux.pointwise.node import broadcast_node
from minflux.pointwise.primitives import primitive_op
from minflux.testing import check_grad


def source(x, y):
    return mf.tanh(x * y) + 0.5 * x - y


def built(x, y, wrt=(True, True)):
    """`source` as expressions over arrays ``x`` and ``y``, in the order Python evaluates it."""
    a, b = argument(x, wrt=wrt[0]), argument(y, wrt=wrt[1])
    f = FunctionBuilder("source_expr")
    value = f.call("add", f.call("tanh", f.call("multiply", a, b)), f.call("multiply", 0.5, a))
    return f.build([f.call("subtract", value, b)])


def partials_of(dual, outs, n_outputs: int = 1) -> dict:
    """``{(output, argument): partial}``: the constant partials and those the kernel computed."""
    partials = dict(dual.constants)
    partials.update(zip(dual.slots, outs[n_outputs:]))
    return partials


def test_values_and_partials_match_the_source_function_and_numpy(backend, rng):
    x, y = rng.standard_normal((2, 7, 3))
    f = built(x, y)
    dual, outs = f.run()
    got = partials_of(dual, outs)
    kinds, float_dtype, arrays, shape = prepare([x, y], "source")
    src_dual, src_outs = compiled(source).run(arrays, kinds, float_dtype, (0, 1), shape)
    want = partials_of(src_dual, src_outs)
    t = np.tanh(x * y)
    np.testing.assert_allclose(outs[0], t + 0.5 * x - y, rtol=1e-13)
    np.testing.assert_allclose(got[(0, 0)], (1 - t * t) * y + 0.5, rtol=1e-12)
    np.testing.assert_allclose(got[(0, 1)], (1 - t * t) * x - 1, rtol=1e-12)
    np.testing.assert_allclose(outs[0], src_outs[0], rtol=1e-14)
    for slot in ((0, 0), (0, 1)):
        np.testing.assert_allclose(np.broadcast_to(got[slot], shape), np.broadcast_to(want[slot], shape),
                                   rtol=1e-14)
    assert isinstance(f.compiled, CompiledFunction) and isinstance(compiled(source), CompiledFunction)


def test_partials_on_the_tape_agree_with_float64_finite_differences(rng):
    def leaf(t):   # check_grad calls the function on Tensors, and on plain arrays for the differences
        return argument(t.value, True, source=t) if isinstance(t, mf.Tensor) else argument(t)

    def through_expressions(x, y):
        b = FunctionBuilder()
        s = b.call("sigmoid", leaf(x))
        f = b.build([b.call("multiply", s, b.call("log1p", b.call("multiply", leaf(y), leaf(y))))])
        dual, outs = f.run()
        return broadcast_node("built", f.sources, [outs[0]], partials_of(dual, outs))

    x, y = rng.standard_normal((2, 4, 5))
    check_grad(lambda x, y: mf.sum(through_expressions(x, y) * np.arange(20.0).reshape(4, 5)), x, y)


def test_several_outputs_constants_of_every_kind_comparisons_and_where(rng):
    x = rng.standard_normal(9)
    n = np.arange(9)
    a, k = argument(x, wrt=True), argument(n)
    b = FunctionBuilder()
    positive = b.call("greater", a, 0.0)
    chosen = b.call("where", positive, b.call("multiply", a, a), b.call("multiply", a, 3))
    counted = b.call("add", k, True)
    f = b.build([chosen, counted, a])
    dual, outs = f.run()
    np.testing.assert_allclose(outs[0], np.where(x > 0, x * x, 3 * x), rtol=1e-14)
    np.testing.assert_array_equal(outs[1], n + 1)
    assert outs[1].dtype == np.int64
    np.testing.assert_array_equal(outs[2], x)
    partials = partials_of(dual, outs, 3)
    np.testing.assert_allclose(np.broadcast_to(partials[(0, 0)], x.shape), np.where(x > 0, 2 * x, 3.0))
    np.testing.assert_allclose(np.broadcast_to(partials[(2, 0)], x.shape), 1.0)
    assert f.kinds == ("f", "i") and f.wrt == (0,)


def test_scalar_rules_and_user_rows_are_primitives_by_row_whatever_their_names(rng):
    @mf.scalar_rule(lambda m, x, y: m.where(x > 0, 1.0, 0.25))
    def leaky(x):
        return x if x > 0 else 0.25 * x

    row = define("mylib.cube_of", lambda xp, x: x * x * x, lambda m, x, y: 3 * x * x,
                 numba="({0} * {0} * {0})", cuda="({0} * {0} * {0})")
    try:
        x = rng.standard_normal(8)
        a = argument(x, wrt=True)
        for rule in (leaky, leaky.__scalar_rule__, leaky.__scalar_rule__.row, leaky.op):
            b = FunctionBuilder()
            f = b.build([b.call(row, b.call(rule, a))])
            dual, outs = f.run()
            lx = np.where(x > 0, x, 0.25 * x)
            np.testing.assert_allclose(outs[0], lx ** 3, rtol=1e-13)
            np.testing.assert_allclose(outs[1], 3 * lx ** 2 * np.where(x > 0, 1.0, 0.25), rtol=1e-13)
        assert leaky.op in f.function().subroutines
        # on the tape too: the dotted user row fuses like any other primitive
        cube = primitive_op("mylib.cube_of")
        with mf.fusion(compile_after=1, min_elements=1):
            mf.fusion_stats(reset=True)
            g = mf.gradient(lambda x: mf.sum(cube(x * 2.0)), x)[0]
            assert mf.fusion_stats()["fused_launches"] == 1
        np.testing.assert_allclose(g, 24 * x * x, rtol=1e-12)
    finally:
        del TABLE["mylib.cube_of"]


def test_one_structure_one_compiled_function_and_the_frontend_names(rng):
    x, y = rng.standard_normal((2, 3))
    first, second = built(x, y), built(y * 2, x)
    assert first.key == second.key and first.compiled is second.compiled and second.is_compiled
    assert built(x, y, wrt=(True, False)).key != first.key
    assert built(x.astype(np.float32), y).key != first.key

    def scaled(by):
        b = FunctionBuilder()
        return b.build([b.call("multiply", argument(x), by)])

    assert scaled(0.25).key != scaled(0.5).key and scaled(np.float64(0.25)).key != scaled(0.25).key
    assert scaled(0.25).compiled is scaled(0.25).compiled
    # calls in the order they were made, named as the frontend names things (kernels cached on disk
    # by their source stay valid): the same IR as the Python source, but for the parameters' names
    written = format_function(compiled(source).parsed.function)
    assert format_function(first.function()) == written.replace("source(", "source_expr(").replace(
        "v_x", "v_leaf0").replace("v_y", "v_leaf1")
    assert "t4 = subtract(t3, v_leaf1)" in format_function(first.function())


@pytest.fixture
def classifications(monkeypatch) -> dict:
    """Counts every classification: the builder's, and prepare's (compiled functions)."""
    calls = {"classify": 0}
    classify = arguments.classify

    def counting(value):
        calls["classify"] += 1
        return classify(value)

    monkeypatch.setattr(expressions, "classify", counting)
    monkeypatch.setattr(arguments, "classify", counting)
    return calls


def test_arguments_are_classified_once_when_they_are_made(classifications, rng):
    calls = classifications
    x, y = rng.standard_normal((2, 5))
    a, b = argument(x, wrt=True), argument(y)
    builder = FunctionBuilder()
    f = builder.build([builder.call("add", builder.call("multiply", a, b), builder.call("exp", a))])
    for _ in range(3):
        dual, outs = f.run()
    assert calls == {"classify": 2}
    np.testing.assert_allclose(outs[0], x * y + np.exp(x), rtol=1e-14)
    np.testing.assert_allclose(partials_of(dual, outs)[(0, 0)], y + np.exp(x), rtol=1e-14)
    prepare([x, 2.0], "again")   # a number among the arrays: prepare classifies each value
    assert calls == {"classify": 4}          # the counter sees prepare's classifications too


def test_a_fused_step_classifies_each_leaf_once_per_op_that_reads_it(classifications, rng):
    counts = classifications
    x, y, z = rng.standard_normal((3, 4096))
    with mf.fusion(compile_after=1):
        mf.fusion_stats(reset=True)
        grads = mf.gradient(lambda x, y, z: mf.sum(x * y + mf.tanh(z)), x, y, z)
        assert mf.fusion_stats()["fused_launches"] == 1
    assert counts["classify"] == 3      # x and y by the product, z by tanh; nothing at the launch
    np.testing.assert_allclose(grads[2], 1 - np.tanh(z) ** 2, rtol=1e-12)


def _call(*args):
    b = FunctionBuilder()
    return b.call(*args)


def _foreign(x):
    other = FunctionBuilder().call("tanh", x)
    return FunctionBuilder().call("exp", other)


@pytest.mark.parametrize("make, error, message", [
    (lambda x: _call("no_such_primitive", x), ValueError, "call(): unknown primitive 'no_such_primitive'"),
    (lambda x: _call("add", x), TypeError, r"call(): add takes 2 argument(s), got 1"),
    (lambda x: _call("tanh", x, x), TypeError, r"call(): tanh takes 1 argument(s), got 2"),
    (lambda x: _call(print, x), TypeError, "call(): a builtin_function_or_method is not a primitive"),
    (lambda x: _call("tanh", "text"), TypeError, "constant(): a str is not a number"),
    (_foreign, ValueError, "call(): an argument is a call made by another FunctionBuilder"),
    (lambda x: argument("text"), TypeError, "argument(): the value is a str"),
    (lambda x: argument(np.ones(2, complex)), TypeError, "argument(): the value has dtype complex128"),
    (lambda x: argument(np.arange(3), wrt=True), ValueError, "only float arguments have partials"),
    (lambda x: constant(np.ones(2)), TypeError, "constant(): a ndarray is not a number"),
    (lambda x: FunctionBuilder().build([]), TypeError, "a non-empty list of expressions"),
])
def test_bad_input_says_what_is_wrong_in_one_line(make, error, message):
    with pytest.raises(error) as caught:
        make(argument(np.ones(2)))
    assert message in str(caught.value) and "\n" not in str(caught.value)
