"""The CUDA backend's generated C, compiled for the CPU through the shim and checked against numpy.

Every kernel of this module is generated first and compiled in ONE shared library (a module-scoped
fixture), so the C compiler runs once or twice per test session. The tests skip without a C compiler.
The reference is the numpy backend evaluating the same transformed IR (``compiled_functions._run_numpy``).
"""
from __future__ import annotations

import numpy as np
import pytest

from minflux.compiler import cuda_backend, cuda_codegen
from cuda_shim import build, c_compiler
from minflux.compiler.ir import Assign, Break, Call, Const, Continue, Function, If, Loop, Return, Var
from minflux.compiler.kinds import infer_kinds
from minflux.compiler.numpy_backend import ArrayOps, evaluate
from minflux.compiler.rules import TABLE

pytestmark = pytest.mark.skipif(c_compiler() is None, reason="needs a C compiler (gcc, clang or $CC)")

FLOATS = [-np.inf, -7.25, -3.5, -2.0, -1.0, -0.5, -1e-3, -0.0, 0.0, 1e-3, 0.5, 1.0, 2.0, 3.5, 9.0,
          40.0, np.inf, np.nan]
INTS = [-2**63, -7, -3, -2, -1, 0, 1, 2, 3, 5, 2**62]
BOOLS = [False, True]
VALUES = {"f": FLOATS, "i": INTS, "b": BOOLS}
TRANSCENDENTAL = {"exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tanh", "sigmoid", "softplus",
                  "power", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
                  "log2", "log10", "atan2", "hypot"}


def primitive_function(op: str, kinds: tuple) -> Function:
    params = [f"a{i}" for i in range(len(kinds))]
    fn = Function(op, params, [Assign("t", Call(op, tuple(Var(p) for p in params))), Return((Var("t"),))],
                  temps={"t"})
    return infer_kinds(fn, list(kinds))


def primitive_cases():
    """(op, argument kinds, float type) for every primitive of the table, on the kinds it accepts."""
    cases = []
    for op, prim in sorted(TABLE.items()):
        if "." in op:                      # user rules defined by other tests
            continue
        if op in ("logical_and", "logical_or", "logical_not"):
            cases.append((op, ("b",) * prim.arity, "float32"))
            continue
        if op == "where":
            cases += [(op, ("b", "f", "f"), "float32"), (op, ("b", "i", "i"), "float64")]
            continue
        for ft in ("float32", "float64"):
            cases.append((op, ("f",) * prim.arity, ft))
        if op in ("add", "subtract", "multiply", "floor_divide", "mod", "negative", "abs", "sign",
                  "maximum", "minimum", "clip", "less", "equal", "greater_equal"):
            cases.append((op, ("i",) * prim.arity, "float64"))
        if op in ("less", "equal", "not_equal", "greater"):
            cases.append((op, ("i", "f"), "float32"))
            cases.append((op, ("b", "f"), "float64"))
    return cases


CASES = primitive_cases()


def case_name(case) -> str:
    op, kinds, ft = case
    return f"k_{op}_{''.join(kinds)}_{ft}"


def grid(kinds: tuple, float_type: str) -> list:
    """Every combination of special values for the argument kinds (outer product, flattened)."""
    axes = [np.array(VALUES[k], dtype={"f": float_type, "i": np.int64, "b": bool}[k]) for k in kinds]
    if len(axes) == 3:  # keep three-argument grids small
        axes = [a[::2] for a in axes]
    mesh = np.meshgrid(*axes, indexing="ij")
    return [m.reshape(-1) for m in mesh]


@pytest.fixture(scope="module")
def primitives():
    kernels = [cuda_codegen.generate(primitive_function(op, kinds), ft, name=case_name((op, kinds, ft)))
               for op, kinds, ft in CASES]
    kernels += [cuda_codegen.generate(control_flow_function(), "float64", name="k_control_flow"),
                cuda_codegen.generate(control_flow_function(), "float32", name="k_control_flow_f32",
                                      fast_math=True)]
    return build(kernels)


@pytest.mark.parametrize("case", CASES, ids=case_name)
def test_every_primitive_matches_numpy_on_special_values(primitives, case):
    op, kinds, ft = case
    args = grid(kinds, ft)
    (got,) = primitives.run(case_name(case), *args)
    fn = primitive_function(op, kinds)
    (want,) = evaluate(fn, args, ArrayOps(np, np.dtype(ft)))
    want = np.broadcast_to(np.asarray(want), got.shape)
    assert got.dtype == want.dtype
    if op == "sigmoid":     # numpy's 0.5 tanh(x / 2) + 0.5 is only accurate to ulp(0.5) absolute
        np.testing.assert_allclose(got, want, rtol=0, atol=np.finfo(ft).eps, equal_nan=True)
    elif op in TRANSCENDENTAL and want.dtype.kind == "f":
        rtol = 4 * np.finfo(ft).eps
        np.testing.assert_allclose(got, want, rtol=rtol, atol=np.finfo(ft).tiny, equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want)     # exact, nan == nan
        if op in ("mod", "floor_divide") and want.dtype.kind == "f":
            zero = want == 0                         # Python's sign convention for zeros too
            np.testing.assert_array_equal(np.signbit(got[zero]), np.signbit(want[zero]))


def test_sigmoid_is_accurate_in_float32(primitives):
    x = np.linspace(-30, 30, 2001, dtype=np.float32)
    (got,) = primitives.run("k_sigmoid_f_float32", x)
    exact = 1 / (1 + np.exp(-x.astype(np.longdouble)))
    ulp = np.spacing(exact.astype(np.float32)).astype(np.longdouble)
    assert float(np.max(np.abs(got - exact) / ulp)) <= 4


def control_flow_function() -> Function:
    """``n`` doublings of ``x`` until it reaches 10, counting the ones above 5 separately.

    Exercises Loop, Break, Continue (which must still run the latch), nested If and int kinds.
    """
    body = [Assign("c", Call("less", (Var("x"), Const(10.0)))), If(Var("c"), [], [Break()]),
            Assign("x", Call("multiply", (Var("x"), Const(2.0)))),
            Assign("big", Call("greater", (Var("x"), Const(5.0)))),
            If(Var("big"), [Continue()], []),
            Assign("small", Call("add", (Var("small"), Const(1))))]
    latch = [Assign("n", Call("add", (Var("n"), Const(1))))]
    fn = Function("control", ["x"], [Assign("n", Const(0)), Assign("small", Const(0)),
                                     Assign("neg", Call("less_equal", (Var("x"), Const(0.0)))),
                                     If(Var("neg"), [Return((Var("x"), Const(-1), Const(-1)))], []),
                                     Loop(body, latch), Return((Var("x"), Var("n"), Var("small")))],
                  n_outputs=3)
    return infer_kinds(fn, ["f"])


@pytest.mark.parametrize("name, dtype", [("k_control_flow", np.float64), ("k_control_flow_f32", np.float32)])
def test_loops_break_continue_and_early_return(primitives, name, dtype):
    x = np.array([-1.0, 0.0, 0.3, 1.0, 3.0, 9.0, 12.0], dtype)
    got = primitives.run(name, x)
    want = evaluate(control_flow_function(), [x], ArrayOps(np, dtype))
    # 1 -> 2, 4 (two small steps), 8, 16 (two big ones): four latch runs
    assert got[0][3] == 16.0 and got[1][3] == 4 and got[2][3] == 2
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, np.broadcast_to(w, g.shape))


def test_generated_code_keeps_real_branches_and_registers():
    from minflux.compiler.dual import differentiate
    from minflux.compiler.frontend import parse

    def f(x, y):
        if x > 0:
            return x * y
        return y * y

    dual = differentiate(infer_kinds(parse(f).function, ["f", "f"]), [0, 1])
    text = cuda_backend.kernel_source(dual, "float32").function
    assert "if (" in text and "return;" in text
    assert "[" not in text                  # no arrays: every dual number is a scalar local
    n_out = dual.n_outputs + len(dual.slots)
    assert text.count("*out") == 3 * n_out   # in the signature and in each of the two returns


def test_fast_math_uses_documented_intrinsics_only_for_float32():
    fn = primitive_function("exp", ("f",))
    assert "__expf(" in cuda_codegen.generate(fn, "float32", fast_math=True).function
    assert "__expf(" not in cuda_codegen.generate(fn, "float32").function
    assert "__expf(" not in cuda_codegen.generate(fn, "float64", fast_math=True).function


def test_unknown_primitive_is_a_clear_compile_error():
    from minflux.compiler.errors import CompileError

    fn = Function("g", ["x"], [Assign("t", Call("lgamma", (Var("x"),))), Return((Var("t"),))], temps={"t"},
                  kinds={"x": "f", "t": "f"}, output_kinds=["f"])
    with pytest.raises(CompileError, match="no C form for the primitive 'lgamma'"):
        cuda_codegen.generate(fn, "float32")


def test_every_primitive_of_the_derivative_table_has_a_c_form():
    missing = {op for op in TABLE if "." not in op} - cuda_codegen.supported_primitives()
    assert not missing, f"give these primitives a C form in cuda_codegen.py: {sorted(missing)}"


# -- every function of the compiler's test suite, end to end through mf.gradient -----------------------
#
# Phase 1 runs each case on the numpy backend and records the transformed functions it ran; phase 2
# prints them all as CUDA C and compiles ONE library; each test then reruns its case with the numpy
# backend's kernel runner replaced by the compiled C, so outputs, partials and the tape's use of them
# come from exactly the code a GPU would run.

from broadcast_programs import CASES as PROGRAM_CASES, Case  # noqa: E402
from test_constructs import _partials  # noqa: E402

import minflux as mf  # noqa: E402
from minflux.compiler import compiled_function as compiled_functions  # noqa: E402
from minflux.optim.adaptive import adam_step  # noqa: E402
from minflux_models.cells import boundary, hm_update, hm_update_blend  # noqa: E402

DTYPES = [np.float64, np.float32]


def _record_and_compile(work):
    """Run every ``(key, compute)`` of ``work`` on the numpy backend, recording the transformed
    functions it runs; print them all as CUDA C in ONE library. Returns the numpy results by key,
    a drop-in replacement for the numpy backend's kernel runner that runs the C, and the record."""
    recorded: dict = {}
    reference: dict = {}
    original = compiled_functions._run_numpy

    def spy(dual, arrays, float_dtype, shape, xp):
        recorded.setdefault((id(dual.function), np.dtype(float_dtype).name), dual)
        return original(dual, arrays, float_dtype, shape, xp)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_functions, "_run_numpy", spy)
        for key, compute in work:
            reference[key] = on_numpy_backend(compute)
    names, kernels = {}, {}
    for (fid, ft), dual in recorded.items():
        ck = cuda_backend.kernel_source(dual, ft, fast_math=False)
        names[(fid, ft)] = ck.name
        kernels[ck.name] = ck
    library = build(list(kernels.values()))

    def c_runner(dual, arrays, float_dtype, shape, xp):
        c_runner.calls += 1
        outs = library.run(names[(id(dual.function), np.dtype(float_dtype).name)], *arrays)
        assert all(o.shape == shape for o in outs)
        return list(outs)

    c_runner.calls = 0
    return reference, c_runner, recorded


def on_numpy_backend(compute):
    before = mf.get_elementwise_backend()
    mf.set_elementwise_backend("numpy")
    try:
        return compute()
    finally:
        mf.set_elementwise_backend(before)


def through_c(runner, compute):
    """``compute()`` with every elementwise kernel run by the compiled C instead of numpy."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(compiled_functions, "_run_numpy", runner)
        calls = runner.calls
        got = on_numpy_backend(compute)
    assert runner.calls > calls, "the compiled C kernels were not used"
    return got


def _arrays(tree) -> list:
    """The arrays of nested lists/tuples of results, in order (None kept)."""
    if isinstance(tree, (list, tuple)):
        return [a for t in tree for a in _arrays(t)]
    return [tree]


@mf.elementwise
def straight_through(x, slope):
    """A scalar rule (the HM-LSTM boundary detector) inside an elementwise function."""
    return boundary(x, slope) * x + boundary(-x, slope)


from minflux_models.cells import cell_update  # noqa: E402  (the paper's benchmark kernel)


B, F, POSITIVE = ("b", 0, 1), ("f", -1.5, 1.5), ("f", 0.1, 1.0)
EXTRA_CASES = [
    Case(straight_through, (F, ("f", 0.5, 2.0))),
    Case(cell_update, (B, B, F, F, F, F)),
    Case(hm_update, (B, B, F, F, F, F, F, F)),
    Case(hm_update_blend, (B, B, F, F, F, F, F, F)),
    Case(adam_step, (F, F, POSITIVE, POSITIVE, POSITIVE, POSITIVE, POSITIVE, POSITIVE, POSITIVE)),
]
ALL_CASES = PROGRAM_CASES + EXTRA_CASES


@pytest.fixture(scope="module")
def compiled_programs():
    inputs = {(case.name, np.dtype(dt).name): (case, case.draw(np.random.default_rng(2), dtype=dt))
              for case in ALL_CASES for dt in DTYPES}
    work = [(key, lambda case=case, args=args: _partials(case, args)) for key, (case, args) in inputs.items()]
    reference, runner, recorded = _record_and_compile(work)
    return inputs, reference, runner, recorded


def _assert_agree(got, want, dtype, rtol=None, atol=None, err_msg=""):
    """Every array of ``got`` equals the one of ``want`` (dtype, shape, values) to rounding."""
    if rtol is None:
        rtol, atol = (1e-11, 1e-12) if dtype == np.float64 else (2e-5, 2e-5)
    got, want = _arrays(got), _arrays(want)
    assert len(got) == len(want)
    for a, b in zip(want, got):
        if a is None:                                # an argument without a derivative rule
            assert b is None
            continue
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_allclose(b, a, rtol=rtol, atol=atol, err_msg=err_msg)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", ALL_CASES, ids=[c.name for c in ALL_CASES])
def test_generated_c_agrees_with_numpy_on_every_test_function(compiled_programs, case, dtype):
    inputs, reference, runner, _ = compiled_programs
    key = (case.name, np.dtype(dtype).name)
    _, args = inputs[key]
    got = through_c(runner, lambda: _partials(case, args))
    _assert_agree(got, reference[key], dtype)
    assert all(a is None or a.dtype == dtype for a in _arrays(got[1]))


def test_the_test_functions_exercise_loops_branches_and_rules(compiled_programs):
    """The compiled set really contains real loops, branches and several outputs."""
    *_, recorded = compiled_programs
    texts = [cuda_backend.kernel_source(d, ft).function for (_, ft), d in recorded.items()]
    assert any("for (;;)" in t for t in texts) and any("goto minflux_latch_" in t for t in texts)
    assert sum("if (" in t for t in texts) >= 8
    assert any(t.count("float *out") >= 4 for t in texts)


def test_half_precision_is_refused_with_the_conversion_to_use():
    with pytest.raises(TypeError, match=r"float32 or float64, not float16.*astype"):
        cuda_codegen.generate(primitive_function("exp", ("f",)), "float16")


# -- the random programs of the compiler's property test ------------------------------------------------

@pytest.mark.slow   # a C compile per program; every test function above is checked in the quick subset
def test_generated_c_agrees_with_numpy_on_random_programs(tmp_path):
    """The property test's random programs (nested ifs, early returns, bounded loops, break and
    continue) on its broadcast shapes, in float64 and float32: outputs and reduced gradients."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from test_property import SHAPES, load_program, outputs_and_partials

    drawn = []

    @settings(max_examples=80, deadline=None, derandomize=True, database=None)
    @given(seed=st.integers(0, 2**31 - 1), shapes=st.sampled_from(SHAPES))
    def draw(seed, shapes):
        drawn.append((seed, shapes))

    draw()
    assert len(drawn) >= 50
    programs = {}
    for seed, shapes in drawn:
        fn, source = load_program(tmp_path, seed)
        rng = np.random.default_rng(seed)
        x, y = rng.uniform(-2, 2, shapes[0]), rng.uniform(-2, 2, shapes[1])
        for dtype in DTYPES:
            programs[(seed, np.dtype(dtype).name)] = (fn, source, x.astype(dtype), y.astype(dtype))
    work = [(key, lambda fn=fn, x=x, y=y: outputs_and_partials(fn, x, y, "numpy"))
            for key, (fn, _, x, y) in programs.items()]
    reference, runner, recorded = _record_and_compile(work)
    assert len(recorded) >= len(drawn)          # at least one kernel per program
    texts = [cuda_backend.kernel_source(d, ft).function for (_, ft), d in recorded.items()]
    assert any("for (;;)" in t for t in texts) and any("goto minflux_end_" in t for t in texts)
    for key, (fn, source, x, y) in programs.items():
        got = through_c(runner, lambda: outputs_and_partials(fn, x, y, "numpy"))
        dtype = np.dtype(key[1])
        _assert_agree(got, reference[key], dtype, err_msg=source)


def test_generated_code_is_also_valid_cpp(compiled_programs, tmp_path):
    """NVRTC compiles CUDA C++: the same text must be C++ too (no jump over an initialisation, no
    C-only construct). g++ checks the syntax of every kernel of the compiler's test functions."""
    import shutil
    import subprocess

    from cuda_shim import harness_source

    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("needs a C++ compiler")
    *_, recorded = compiled_programs
    kernels = {}
    for (_, ft), dual in recorded.items():
        for fast in (False, True):
            ck = cuda_backend.kernel_source(dual, ft, fast_math=fast)
            kernels[ck.name] = ck
    source = tmp_path / "kernels.cpp"
    source.write_text(harness_source(list(kernels.values())))
    done = subprocess.run([cxx, "-std=c++17", "-fsyntax-only", "-Drestrict=__restrict__", str(source)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
