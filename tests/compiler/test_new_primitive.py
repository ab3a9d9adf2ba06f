"""A primitive added from outside the library is one row of the table, and then works everywhere a
built-in one does: on arrays, on the tape op by op, fused, inside scalar functions on the numba and
numpy backends in every AD mode, and in the CUDA backend's C (compiled for the CPU by the harness)."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.compiler import cost, cuda_codegen, rules
from minflux.compiler.ir import Assign, Call, Function, Return, Var, result_kind
from minflux.compiler.kinds import infer_kinds

NAME = "cube_plus_x_for_a_test"
X = np.array([-2.0, -0.5, 0.0, 0.75, 3.0])
VALUE = X ** 3 + X
DERIVATIVE = 3 * X ** 2 + 1


@pytest.fixture(scope="module")
def op():
    made = mf.define_primitive(NAME, lambda xp, x: x * x * x + x, lambda m, x, y: 3 * x * x + 1,
                               cost=3.0, finite=True, numba="({0} * {0} * {0} + {0})",
                               cuda="({0} * {0} * {0} + {0})")
    yield made
    del rules.TABLE[NAME]


def test_the_row_is_what_every_table_reader_sees(op):
    row = rules.TABLE[NAME]
    assert result_kind(NAME, ["i"]) == "f" and row.finite and cost._weight(NAME) == 3.0
    assert NAME in cuda_codegen.supported_primitives()


def test_on_arrays_and_on_the_tape(op):
    np.testing.assert_allclose(op(X), VALUE, rtol=1e-15)
    for fused in (False, True):
        old = mf.set_fusion(enabled=fused, compile_after=1, min_elements=1)
        try:
            (g,) = mf.gradient(lambda x: mf.sum(op(x) * 2.0), X)
        finally:
            mf.set_fusion(**old)
        np.testing.assert_allclose(g, 2 * DERIVATIVE, rtol=1e-14)


@pytest.mark.parametrize("mode", ["auto", "mixed", "adjoint", "reverse"])
def test_in_a_scalar_function_on_both_backends(op, backend, mode):
    def f(x):
        if x > 0:
            return op(x) * 2.0
        return op(x)

    scale = np.where(X > 0, 2.0, 1.0)
    np.testing.assert_allclose(mf.broadcast(f, X, mode=mode), scale * VALUE, rtol=1e-14)
    (g,) = mf.gradient(lambda x: mf.sum(mf.broadcast(f, x, mode=mode)), X)
    np.testing.assert_allclose(g, scale * DERIVATIVE, rtol=1e-14)


def test_the_llvm_compiler_leaves_a_row_without_its_spelling_to_numba(op):
    from minflux.compiler import llvm_backend

    fn = Function("f", ["x"], [Assign("y", Call(NAME, (Var("x"),))), Return((Var("y"),))])
    with pytest.raises(llvm_backend.Unspelled, match=NAME):
        llvm_backend.generate_ir(infer_kinds(fn, ["f"]), "float64", ("F",))


def test_in_the_cuda_backends_c(op):
    cuda_shim = pytest.importorskip("cuda_shim")
    if cuda_shim.c_compiler() is None:
        pytest.skip("needs a C compiler (gcc, clang or $CC)")
    fn = infer_kinds(Function("k", ["a"], [Assign("t", Call(NAME, (Var("a"),))), Return((Var("t"),))],
                              temps={"t"}), ["f"])
    library = cuda_shim.build([cuda_codegen.generate(fn, "float64", name="k_new_primitive")])
    (got,) = library.run("k_new_primitive", X)
    np.testing.assert_allclose(got, VALUE, rtol=1e-15)


def test_a_name_is_defined_once(op):
    with pytest.raises(ValueError, match="exists; give the new one its own name"):
        mf.define_primitive(NAME, lambda xp, x: x, lambda m, x, y: 1)
    np.testing.assert_allclose(op(X), VALUE, rtol=1e-15)       # the row in use is untouched


def test_a_row_without_a_spelling_is_refused_by_name():
    plain = mf.define_primitive("unspelled_for_a_test", lambda xp, x: x + 1, lambda m, x, y: 1)
    old = mf.get_elementwise_backend()
    try:
        mf.set_elementwise_backend("numba")
        with pytest.raises(mf.CompileError, match="unspelled_for_a_test.*numba="):
            mf.broadcast(lambda x: plain(x) * 2.0, X)
        mf.set_elementwise_backend("numpy")            # the reference backend needs only the value
        np.testing.assert_array_equal(mf.broadcast(lambda x: plain(x) * 2.0, X), (X + 1) * 2.0)
    finally:
        mf.set_elementwise_backend(old)
        del rules.TABLE["unspelled_for_a_test"]


SLOPE = 3.0   # read by the derivative rule of the primitive below


@pytest.fixture(scope="module")
def scaled_op():
    name = "scaled_by_a_global_for_a_test"
    made = mf.define_primitive(name, lambda xp, x: x * 1.0, lambda m, x, y: SLOPE + 0 * x,
                               finite=True, numba="({0} * 1.0)", cuda="({0} * 1.0)")
    yield made
    del rules.TABLE[name]


@pytest.mark.parametrize("where", ["array rules", "fused", "auto", "mixed", "adjoint", "reverse"])
def test_a_global_its_derivative_rule_reads_is_read_again_when_it_changes(scaled_op, backend, where):
    global SLOPE

    def f(x):
        return scaled_op(x) * 2.0

    def loss(x):
        return mf.sum(f(x) if where in ("array rules", "fused") else mf.broadcast(f, x, mode=where))

    try:
        for SLOPE in (3.0, 3.0, -0.5, 4.0):
            with mf.fusion(enabled=where == "fused", compile_after=1, min_elements=1):
                (g,) = mf.gradient(loss, X)
            np.testing.assert_array_equal(g, np.full_like(X, 2 * SLOPE))
    finally:
        SLOPE = 3.0
