"""Scalar rules are primitives by identity: several rules made by one factory (one ``def``, one
qualified name) keep their own values and derivatives everywhere a rule can be used."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import minflux as mf
from minflux.testing import check_grad


def make_hard_sigmoid(a):
    """The HM-LSTM's straight-through hard sigmoid of slope ``a``: one rule per slope."""
    @mf.scalar_rule(lambda m, x, y: m.where(abs(x) < 1 / a, a / 2, 0.0))
    def hard_sigmoid(x):
        return mf.clip(a * x / 2 + 0.5, 0.0, 1.0)

    return hard_sigmoid


def hard_sigmoid_value(a, x):
    return np.clip(a * x / 2 + 0.5, 0.0, 1.0)


def hard_sigmoid_slope(a, x):
    return np.where(np.abs(x) < 1 / a, a / 2, 0.0)


SLOPES = (2.0, 3.0, 5.0)
RULES = {a: make_hard_sigmoid(a) for a in SLOPES}


@pytest.fixture
def fuse_at_once():
    old = mf.set_fusion(enabled=True, compile_after=1, min_elements=1)
    yield
    mf.set_fusion(**old)


def test_rules_of_one_factory_are_distinct_primitives():
    ops = {rule.op for rule in RULES.values()}
    assert len(ops) == len(SLOPES)
    assert len({rule.__qualname__ for rule in RULES.values()}) == 1   # one qualified name, three rows


def test_each_rule_keeps_its_own_value_and_derivative_on_arrays(backend):
    x = np.array([-0.4, 0.1, 0.45, 0.3])
    for a, rule in RULES.items():
        np.testing.assert_allclose(rule(x), hard_sigmoid_value(a, x), rtol=1e-15)
        g = mf.gradient(lambda t: mf.sum(rule(t)), x)[0]
        np.testing.assert_allclose(g, hard_sigmoid_slope(a, x), rtol=1e-15)
    np.testing.assert_allclose(RULES[2.0](x), [0.1, 0.6, 0.95, 0.8], rtol=1e-15)
    np.testing.assert_array_equal(mf.gradient(lambda t: mf.sum(RULES[2.0](t)), x)[0], [1.0, 1.0, 1.0, 1.0])


def test_each_rule_keeps_its_own_derivative_inside_fused_expressions(fuse_at_once, rng):
    x = rng.uniform(-0.6, 0.6, 64)
    w = rng.standard_normal(64)

    def loss(x, w):
        return mf.sum(RULES[2.0](x) * w + RULES[3.0](x) * w * w + RULES[5.0](x))

    for call in range(2):   # the first call may run op by op, the second runs the fused kernel
        gx, gw = mf.gradient(loss, x, w)
        np.testing.assert_allclose(gx, hard_sigmoid_slope(2.0, x) * w + hard_sigmoid_slope(3.0, x) * w * w
                                   + hard_sigmoid_slope(5.0, x), rtol=1e-12)
        np.testing.assert_allclose(gw, hard_sigmoid_value(2.0, x) + 2 * w * hard_sigmoid_value(3.0, x),
                                   rtol=1e-12)


@pytest.mark.parametrize("mode", ["auto", "mixed", "adjoint", "reverse"])
def test_each_rule_keeps_its_own_derivative_inside_elementwise_functions(backend, mode, rng):
    h2, h3 = RULES[2.0], RULES[3.0]

    def both(x, y):
        return h2(x) * y + h3(x)

    x = rng.uniform(-0.6, 0.6, 16)
    y = rng.standard_normal(16)
    np.testing.assert_allclose(mf.broadcast(both, x, y, mode=mode),
                               hard_sigmoid_value(2.0, x) * y + hard_sigmoid_value(3.0, x), rtol=1e-12)
    gx, gy = mf.gradient(lambda x, y: mf.sum(mf.broadcast(both, x, y, mode=mode)), x, y)
    np.testing.assert_allclose(gx, hard_sigmoid_slope(2.0, x) * y + hard_sigmoid_slope(3.0, x), rtol=1e-12)
    np.testing.assert_allclose(gy, hard_sigmoid_value(2.0, x), rtol=1e-12)


def test_a_rule_with_a_true_derivative_matches_finite_differences():
    def make_scaled_sine(a):
        @mf.scalar_rule(lambda m, x, y: a * m.cos(a * x))
        def scaled_sine(x):
            return mf.sin(a * x)

        return scaled_sine

    s1, s2 = make_scaled_sine(1.5), make_scaled_sine(-2.5)
    x = np.linspace(-1.0, 1.0, 7)
    check_grad(lambda t: mf.sum(s1(t) + s2(t) * t), x)
    g = mf.gradient(lambda t: mf.sum(s1(t)), x)[0]
    np.testing.assert_allclose(g, 1.5 * np.cos(1.5 * x), rtol=1e-12)


_CHILD = textwrap.dedent("""
    import json
    import sys
    import numpy as np
    import minflux as mf

    def make(a):
        @mf.scalar_rule(lambda m, x, y: m.where(abs(x) < 1 / a, a / 2, 0.0))
        def hs(x):
            return mf.clip(a * x / 2 + 0.5, 0.0, 1.0)
        return hs

    slopes = [float(s) for s in sys.argv[1:]]
    rules = [make(a) for a in slopes]          # the first one made gets the plain name
    x = np.array([-0.4, 0.1, 0.45, 0.3])
    first = rules[0]

    @mf.elementwise
    def uses_first(x):
        return first(x) * 1.0

    with mf.fusion(compile_after=1, min_elements=1):
        g = mf.gradient(lambda t: mf.sum(rules[0](t) * t), x)[0]
    print(json.dumps([uses_first(x).tolist(), g.tolist()]))
""")


def test_the_disk_cache_never_serves_one_rule_for_another(tmp_path):
    """Names depend on the order rules are made in; kernels on disk are keyed by what they compute."""
    env = dict(os.environ, MINFLUX_CACHE_DIR=str(tmp_path / "cache"))
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    x = np.array([-0.4, 0.1, 0.45, 0.3])
    for slopes in (["2.0", "3.0"], ["3.0", "2.0"], ["2.0", "3.0"]):
        out = subprocess.run([sys.executable, str(script), *slopes], env=env, capture_output=True,
                             text=True, check=True).stdout
        value, grad = (np.array(v) for v in json.loads(out))
        a = float(slopes[0])
        np.testing.assert_allclose(value, hard_sigmoid_value(a, x), rtol=1e-15)
        np.testing.assert_allclose(grad, hard_sigmoid_slope(a, x) * x + hard_sigmoid_value(a, x), rtol=1e-12)


@pytest.mark.parametrize("rule", [lambda m, x: 1.0, lambda m, x, a: 1.0, lambda x, a, y: 1.0,
                                  lambda m, x, a, y, extra: 1.0], ids=["no y", "no y 2", "no m", "extra"])
def test_a_rule_with_the_wrong_signature_is_refused_when_defined(rule):
    """Not at the first gradient, with a raw TypeError from inside the compiler."""
    with pytest.raises(TypeError, match=r"^scalar_rule: derivative rule 1 of .*two_args has the signature "
                                        r"\(.*\); a rule is called as \(m, \*args, y\), here \(m, x, a, y\)"):
        @mf.scalar_rule(rule)
        def two_args(x, a):
            return x * a


def test_rules_that_take_the_arguments_in_any_spelling_are_accepted():
    @mf.scalar_rule(lambda m, x, a, y: a, lambda m, *rest: rest[0])
    def product(x, a):
        return x * a
    g = mf.gradient(lambda x, a: mf.sum(product(x, a)), np.array([2.0]), np.array([3.0]))
    np.testing.assert_array_equal(g[0], [3.0])
    np.testing.assert_array_equal(g[1], [2.0])


THRESHOLD, WINDOW = 0.0, 1.0   # read by `thresholded`'s body and by its derivative rule


@mf.scalar_rule(lambda m, x, y: m.where(abs(x) < WINDOW, 0.5, 0.0))
def thresholded(x):
    return 1.0 if x > THRESHOLD else 0.0


@mf.elementwise
def thresholded_times(x, w):
    return thresholded(x) * w


@pytest.mark.parametrize("where", ["arrays", "auto", "mixed", "adjoint", "reverse", "fused"])
def test_a_rule_reads_the_globals_of_its_body_and_of_its_derivative_again_when_they_change(
        where, backend, fuse_at_once, rng):
    """Every kernel compiled from the rule (its own, an elementwise function's, a fused expression's)
    is compiled again once a global it read as a constant has another value."""
    global THRESHOLD, WINDOW
    x, w = rng.uniform(-1.5, 1.5, 256), rng.standard_normal(256)

    def value(x, w):
        if where in ("arrays", "fused"):   # the rule's own kernel and array rules, or one fused kernel
            return thresholded(x) * w
        return mf.broadcast(thresholded_times, x, w, mode=where)

    try:
        for THRESHOLD, WINDOW in [(0.0, 1.0), (0.0, 1.0), (0.7, 1.0), (0.7, 1.0), (0.7, 0.25), (-0.5, 2.0)]:
            with mf.fusion(enabled=where == "fused"):
                got, (gx, gw) = mf.withgradient(lambda x, w: mf.sum(value(x, w)), x, w)
            step, slope = (x > THRESHOLD).astype(float), np.where(np.abs(x) < WINDOW, 0.5, 0.0)
            np.testing.assert_allclose(got, np.sum(step * w), rtol=1e-12)
            np.testing.assert_array_equal(gx, slope * w)
            np.testing.assert_array_equal(gw, step)
    finally:
        THRESHOLD, WINDOW = 0.0, 1.0
