"""Random scalar programs (expressions, nested ifs, early returns, bounded loops) on random broadcast
shapes, in every AD mode: the numba backend agrees with the numpy reference, and both agree with
finite differences."""
from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import minflux as mf

UNARY = ["mf.tanh({})", "mf.sigmoid({})", "math.sin({})", "math.cos({})", "abs({})", "-({})",
         "mf.sqrt(1 + ({0}) * ({0}))", "mf.log(1 + ({0}) * ({0}))", "mf.exp(mf.tanh({}))"]
BINARY = ["({} + {})", "({} - {})", "({} * {})", "({}) / (1 + ({}) ** 2)", "max({}, {})", "min({}, {})",
          "({} if {} > 0 else 0.5)"]


class ProgramWriter:
    """Writes the source of a random scalar function of x and y with a fixed number of outputs."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.vars = ["x", "y"]
        self.lines: list = []
        self.counter = 0
        self.outputs = int(rng.integers(1, 3))

    def const(self) -> str:
        return f"{self.rng.uniform(-1.5, 1.5):.3f}"

    def expr(self, depth: int) -> str:
        r = self.rng.random()
        if depth <= 0 or r < 0.25:
            return self.const() if r < 0.05 else str(self.rng.choice(self.vars))
        if r < 0.6:
            return str(self.rng.choice(UNARY)).format(self.expr(depth - 1))
        template = str(self.rng.choice(BINARY))
        return template.format(self.expr(depth - 1), self.expr(depth - 1))

    def ret(self) -> str:
        return "return " + ", ".join(self.expr(2) for _ in range(self.outputs))

    def block(self, indent: str, depth: int, loop: bool):
        for _ in range(int(self.rng.integers(1, 4))):
            r = self.rng.random()
            target = str(self.rng.choice(self.vars))
            if depth >= 2 or r < 0.35:
                self.lines.append(f"{indent}{target} = {self.expr(2)}")
            elif r < 0.6:
                self.lines.append(f"{indent}if {self.expr(1)} > {self.const()}:")
                self.block(indent + "    ", depth + 1, loop)
                if self.rng.random() < 0.6:
                    self.lines.append(f"{indent}else:")
                    self.block(indent + "    ", depth + 1, loop)
            elif r < 0.7:
                self.lines.append(f"{indent}if {self.expr(1)} > {self.const()}:")
                self.lines.append(f"{indent}    {self.ret()}")
            elif r < 0.85 and loop:
                jump = "break" if self.rng.random() < 0.5 else "continue"
                self.lines.append(f"{indent}if {self.expr(1)} > {self.const()}:")
                self.lines.append(f"{indent}    {jump}")
            elif depth == 0:
                self.loop(indent, depth)
            else:
                self.lines.append(f"{indent}{target} = {self.expr(1)}")

    def loop(self, indent: str, depth: int):
        bound = int(self.rng.integers(1, 4))
        if self.rng.random() < 0.5:
            self.lines.append(f"{indent}for k in range({bound}):")
            self.block(indent + "    ", depth + 1, True)
        else:
            counter = f"n{self.counter}"
            self.counter += 1
            self.lines.append(f"{indent}{counter} = 0")
            self.lines.append(f"{indent}while {counter} < {bound} and {self.expr(1)} > {self.const()}:")
            self.lines.append(f"{indent}    {counter} += 1")
            self.block(indent + "    ", depth + 1, True)

    def source(self, name: str) -> str:
        for _ in range(int(self.rng.integers(0, 3))):
            var = f"v{self.counter}"
            self.counter += 1
            self.lines.append(f"    {var} = {self.expr(2)}")
            self.vars.append(var)
        self.block("    ", 0, False)
        self.lines.append(f"    {self.ret()}")
        body = "\n".join(self.lines)
        return f"import math\nimport minflux as mf\n\n\ndef {name}(x, y):\n{body}\n"


def load_program(tmp_path, seed: int):
    name = f"random_program_{seed}"
    path = tmp_path / f"{name}.py"
    path.write_text(ProgramWriter(np.random.default_rng(seed)).source(name))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, name), path.read_text()


MODES = ("mixed", "adjoint", "auto", "reverse")


def outputs_and_partials(fn, x, y, backend: str, mode: str = "auto"):
    """Outputs, and the gradients of the sum of each output w.r.t. x and y (zeros where none)."""
    mf.set_elementwise_backend(backend)
    try:
        partials, m, n_out = [], 0, 1
        while m < n_out:   # the outputs come back with the first gradient (one kernel for both)
            def loss(x, y, m=m):
                outs = _as_list(mf.broadcast(fn, x, y, mode=mode))
                # the zero term keeps the loss on the tape when an output does not depend on x, y
                return (mf.sum(outs[m]) + 0.0 * (mf.sum(x) + mf.sum(y)), *outs)
            value, grads = mf.withgradient(loss, x, y)
            outs, n_out = (list(value[1:]), len(value) - 1) if m == 0 else (outs, n_out)
            partials.append([np.zeros_like(a) if g is None else g for g, a in zip(grads, (x, y))])
            m += 1
        return outs, partials
    finally:
        mf.set_elementwise_backend("numba")


def primal(fn, x, y):
    mf.set_elementwise_backend("numpy")
    try:
        return _as_list(mf.broadcast(fn, x, y))
    finally:
        mf.set_elementwise_backend("numba")


def _as_list(out):
    return list(out) if isinstance(out, tuple) else [out]


SHAPES = [((4, 3), (4, 3)), ((4, 1), (4, 3)), ((1, 3), (4, 1)), ((), (5,)), ((2, 1, 3), (4, 1))]


@settings(max_examples=10, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31 - 1), shapes=st.sampled_from(SHAPES))
@pytest.mark.parametrize("mode", [pytest.param(m, marks=pytest.mark.slow) if m != "reverse" else m
                                  for m in MODES])  # numba compiles ten large programs per mode
def test_random_programs(tmp_path, seed, shapes, mode):
    fn, source = load_program(tmp_path, seed)
    rng = np.random.default_rng(seed)
    shape = np.broadcast_shapes(*shapes)
    if mode == "adjoint" and ("while " in source or "for " in source):
        with pytest.raises(ValueError, match='without while/for loops; use mode="mixed"'):
            outputs_and_partials(fn, np.ones(shape), np.ones(shape), "numba", mode)
        return

    # the numpy reference against central differences, per lane on full-shape inputs, on lanes where
    # the function is smooth at the scale of the step (two step sizes agree): a lane next to a
    # branch switch or a kink is not checked
    x = rng.uniform(-2, 2, shape)
    y = rng.uniform(-2, 2, shape)
    _, partials = outputs_and_partials(fn, x, y, "numpy", mode)
    checked = 0
    for k in range(2):
        fds = []
        for eps in (1e-6, 1e-5):
            up = [x + eps, y] if k == 0 else [x, y + eps]
            down = [x - eps, y] if k == 0 else [x, y - eps]
            fds.append([(u - d) / (2 * eps) for u, d in zip(primal(fn, *up), primal(fn, *down))])
        for m, partial in enumerate(partials):
            fd1, fd2 = fds[0][m], fds[1][m]
            smooth = np.abs(fd1 - fd2) <= 1e-4 * (1 + np.abs(fd1))
            checked += int(smooth.sum())
            np.testing.assert_allclose(partial[k][smooth], fd1[smooth], rtol=1e-5, atol=1e-6,
                                       err_msg=source)
    assert checked >= 0.8 * 2 * len(partials) * x.size, source

    # numba against numpy on the broadcast shapes: outputs and reduced gradients
    bx = rng.uniform(-2, 2, shapes[0])
    by = rng.uniform(-2, 2, shapes[1])
    ref_out, ref_partials = outputs_and_partials(fn, bx, by, "numpy", mode)
    got_out, got_partials = outputs_and_partials(fn, bx, by, "numba", mode)
    for a, b in zip(ref_out, got_out):
        assert a.shape == b.shape == shape
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12, err_msg=source)
    for pa, pb in zip(ref_partials, got_partials):
        for a, b, want_shape in zip(pa, pb, shapes):
            assert a.shape == b.shape == tuple(want_shape)
            np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11, err_msg=source)


def test_program_writer_covers_the_constructs():
    sources = [ProgramWriter(np.random.default_rng(s)).source("f") for s in range(40)]
    text = "\n".join(sources)
    for construct in ("if ", "else:", "return", "while ", "for k in range", "break", "continue"):
        assert construct in text, construct


@pytest.mark.slow   # real branches: also tests/compiler/test_numba_backend.py, on a small kernel
@pytest.mark.parametrize("seed", [11])
def test_random_programs_compile_to_numba_in_both_branch_forms(tmp_path, seed, monkeypatch):
    from minflux.runtime import settings
    fn, source = load_program(tmp_path, seed)
    x = np.linspace(-2, 2, 12).reshape(3, 4)
    y = np.linspace(1.5, -1.5, 12).reshape(3, 4)
    results = []
    for form in ("auto", "real"):
        monkeypatch.setitem(settings._values, "numba_branches", form)
        results.append(outputs_and_partials(fn, x, y, "numba"))
    for a, b in zip(results[0][0], results[1][0]):
        np.testing.assert_allclose(a, b, rtol=1e-12, err_msg=source)
