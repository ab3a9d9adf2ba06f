"""Each rule against an update sequence derived by hand (intermediate values written out below).

Every sequence starts from x0 = [1, 1] and uses the fixed gradients g1, g2, g3 (independent of x).
"""
import math

import numpy as np
import pytest

import minflux as mf
from minflux import optim

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

G = [np.array([1.0, -2.0]), np.array([0.5, 0.0]), np.array([-1.0, 4.0])]


def run(rule, steps=3, x0=(1.0, 1.0)):
    x = np.array(x0)
    state = optim.setup(rule, x)
    xs = []
    for g in G[:steps]:
        optim.update(state, x, g)
        xs.append(x.copy())
    return xs


def check(xs, expected):
    for k, (got, want) in enumerate(zip(xs, expected)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15, err_msg=f"after step {k + 1}")


def test_descent():
    check(run(optim.Descent(0.1)), [[0.9, 1.2], [0.85, 1.2], [0.95, 0.8]])


def test_momentum():
    # v1 = 0.1 g1 = [0.1, -0.2];  v2 = 0.5 v1 + 0.1 g2 = [0.1, -0.1];  v3 = [-0.05, 0.35]
    check(run(optim.Momentum(lr=0.1, rho=0.5)), [[0.9, 1.2], [0.8, 1.3], [0.85, 0.95]])


def test_nesterov():
    # same velocities as momentum; steps 0.5 v_t + 0.1 g_t = [0.15, -0.3], [0.1, -0.05], [-0.125, 0.575]
    check(run(optim.Nesterov(lr=0.1, rho=0.5)), [[0.85, 1.3], [0.75, 1.35], [0.875, 0.775]])


def test_rmsprop():
    # acc1 = 0.25 g1^2 = [0.25, 1];  acc2 = 0.75 acc1 + 0.25 g2^2 = [0.25, 0.75]
    # acc3 = 0.75 acc2 + 0.25 g3^2 = [0.4375, 4.5625]
    x3 = [0.7 + 0.1 / math.sqrt(0.4375), 1.2 - 0.4 / math.sqrt(4.5625)]
    check(run(optim.RMSProp(lr=0.1, rho=0.75, eps=0.0)), [[0.8, 1.2], [0.7, 1.2], x3])


def test_rmsprop_eps_in_the_denominator():
    # acc1 = 0.5 * 4 = 2;  step = 0.1 * 2 / (sqrt(2) + 1)
    x = np.array([0.0])
    state = optim.setup(optim.RMSProp(lr=0.1, rho=0.5, eps=1.0), x)
    optim.update(state, x, np.array([2.0]))
    np.testing.assert_allclose(x, [-0.2 / (math.sqrt(2) + 1)], rtol=1e-14)


def test_adagrad():
    # acc1 = [1, 4], acc2 = [1.25, 4], acc3 = [2.25, 20]
    x2 = [0.9 - 0.05 / math.sqrt(1.25), 1.1]
    x3 = [x2[0] + 0.1 / 1.5, 1.1 - 0.4 / math.sqrt(20)]
    check(run(optim.AdaGrad(lr=0.1, eps=0.0)), [[0.9, 1.1], x2, x3])


def adam_steps():
    """Adam(lr=0.1, beta1=0.5, beta2=0.75, eps=0) steps, from the moments worked out by hand.

    t=1: m = [0.5, -1],     v = [0.25, 1],        m/(1-.5)   = [1, -2],     v/(1-.75)     = [1, 4]
    t=2: m = [0.5, -0.5],   v = [0.25, 0.75],     m/(0.75)   = [2/3, -2/3], v/(0.4375)    = [4/7, 12/7]
    t=3: m = [-0.25, 1.75], v = [0.4375, 4.5625], m/(0.875)  = [-2/7, 2],   v/(0.578125)  = [28/37, 292/37]
    """
    return [np.array([0.1, -0.1]),
            0.1 * np.array([(2 / 3) / math.sqrt(4 / 7), (-2 / 3) / math.sqrt(12 / 7)]),
            0.1 * np.array([(-2 / 7) / math.sqrt(28 / 37), 2 / math.sqrt(292 / 37)])]


def test_adam():
    s1, s2, s3 = adam_steps()
    x1 = np.array([0.9, 1.1])
    check(run(optim.Adam(lr=0.1, beta1=0.5, beta2=0.75, eps=0.0)), [x1, x1 - s2, x1 - s2 - s3])


def test_adamw_decays_the_weights_by_lr_times_decay():
    s1, s2, s3 = adam_steps()
    x0 = np.array([1.0, 1.0])
    x1 = x0 - s1 - 0.1 * 0.5 * x0          # [0.85, 1.05]
    x2 = x1 - s2 - 0.1 * 0.5 * x1
    x3 = x2 - s3 - 0.1 * 0.5 * x2
    check(run(optim.AdamW(lr=0.1, beta1=0.5, beta2=0.75, eps=0.0, decay=0.5)), [x1, x2, x3])


def test_weight_decay_chained_before_descent():
    # step = 0.1 (g + 0.5 x):  [0.15, -0.15], then 0.1 ([0.5, 0] + 0.5 [0.85, 1.15]) = [0.0925, 0.0575]
    rule = optim.chain(optim.WeightDecay(0.5), optim.Descent(0.1))
    check(run(rule, steps=2), [[0.85, 1.15], [0.7575, 1.0925]])


def test_clip_value_then_descent():
    check(run(optim.chain(optim.ClipValue(1.5), optim.Descent(1.0)), steps=3),
          [[0.0, 2.5], [-0.5, 2.5], [0.5, 1.0]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_adam_bias_corrections_are_one_minus_beta_to_the_step_count(dtype):
    rule = optim.Adam(beta1=0.9, beta2=0.999)
    for t in (1, 2, 10, 1000, 10**6):
        got = rule.corrections(np.array(t), dtype)
        assert [(type(c), c.dtype, c.shape) for c in got] == [(np.ndarray, np.dtype(dtype), ())] * 2
        for c, beta in zip(got, (0.9, 0.999)):
            exact = -math.expm1(t * math.log(beta))   # 1 - beta^t without the cancellation
            # the formula 1 - beta^t in float64 (beta^t near 1 loses its low bits), rounded to dtype
            assert abs(float(c) - exact) <= np.finfo(dtype).eps * exact + 4 * np.finfo(np.float64).eps


def test_adam_state_holds_the_moments_and_counts_steps():
    x = np.ones(2)
    state = optim.setup(optim.Adam(), x)
    optim.update(state, x, G[0])
    optim.update(state, x, G[1])
    m, v, t = state.state
    assert t == 2
    np.testing.assert_allclose(m, 0.9 * 0.1 * G[0] + 0.1 * G[1], rtol=1e-14)
    np.testing.assert_allclose(v, 0.999 * 0.001 * G[0] ** 2 + 0.001 * G[1] ** 2, rtol=1e-14)


@pytest.mark.parametrize("rule", [optim.Descent(0.1), optim.Momentum(), optim.Nesterov(), optim.RMSProp(),
                                  optim.AdaGrad(), optim.Adam(), optim.AdamW(), optim.WeightDecay(),
                                  optim.ClipValue(), optim.ClipNorm()])
def test_float32_parameters_stay_float32_and_in_place(rule):
    x = np.ones((3, 2), np.float32)
    before = x
    state = optim.setup(rule, x)
    optim.update(state, x, np.full((3, 2), 0.5, np.float32))
    assert x is before and x.dtype == np.float32
    assert (x != 1).all()
    leaves = mf.tree.leaves(state.state)
    assert all(a.dtype == np.float32 for a in leaves if a.dtype.kind != "i")
    assert all(a.shape == () and a.dtype == np.int64 and a == 1 for a in leaves if a.dtype.kind == "i")


def test_rules_are_frozen_and_chains_flatten():
    with pytest.raises(Exception):
        optim.Adam().lr = 1.0
    rule = optim.chain(optim.chain(optim.ClipNorm(1.0), optim.WeightDecay(0.1)), optim.Adam())
    assert [type(r).__name__ for r in rule.rules] == ["ClipNorm", "WeightDecay", "Adam"]
    with pytest.raises(TypeError, match="optimisation rules"):
        optim.chain(optim.Adam(), 0.1)
