"""Every rule refuses a hyperparameter outside its range when it is made or adjusted, with one line
naming the rule, the field and the value; values at the edges of the ranges are accepted."""
import math

import numpy as np
import pytest

import minflux as mf
from minflux import optim

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

RULES = {"Descent": ["lr"], "Momentum": ["lr", "rho"], "Nesterov": ["lr", "rho"],
         "RMSProp": ["lr", "rho", "eps"], "AdaGrad": ["lr", "eps"],
         "Adam": ["lr", "beta1", "beta2", "eps"], "AdamW": ["lr", "beta1", "beta2", "eps", "decay"],
         "Lion": ["lr", "beta1", "beta2", "decay"], "WeightDecay": ["decay"]}
FACTORS = {"rho", "beta1", "beta2"}
CASES = [(rule, field) for rule, fields in RULES.items() for field in fields]


@pytest.mark.parametrize("rule,field", CASES, ids=[f"{r}.{f}" for r, f in CASES])
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf, -1e-12], ids=str)
def test_out_of_range_values_are_refused(rule, field, value):
    allowed = "a number in [0, 1)" if field in FACTORS else "a finite number >= 0"
    with pytest.raises(ValueError) as info:
        getattr(optim, rule)(**{field: value})
    assert str(info.value) == f"{rule}: {field} must be {allowed}, got {value!r}"


@pytest.mark.parametrize("rule,field", [(r, f) for r, f in CASES if f in FACTORS],
                         ids=[f"{r}.{f}" for r, f in CASES if f in FACTORS])
def test_decay_factors_must_stay_below_one(rule, field):
    with pytest.raises(ValueError, match=rf"^{rule}: {field} must be a number in \[0, 1\), got 1.0$"):
        getattr(optim, rule)(**{field: 1.0})
    assert getattr(getattr(optim, rule)(**{field: 0.0}), field) == 0.0


@pytest.mark.parametrize("value", ["0.1", None, True, np.ones(2)], ids=["str", "None", "bool", "array"])
def test_non_numbers_are_refused_with_their_type(value):
    with pytest.raises(TypeError, match=rf"^Adam: lr must be a finite number >= 0, got .* \({type(value).__name__}\)$"):
        optim.Adam(value)


def test_edges_and_numpy_scalars_are_accepted():
    assert optim.Adam(0.0, eps=0.0).lr == 0.0
    assert optim.Descent(np.float32(1e-3)).lr == np.float32(1e-3)
    assert optim.Momentum(lr=np.int64(1), rho=0.0).lr == 1


def test_adjust_checks_the_new_value_and_leaves_the_state_unchanged():
    w = np.ones(2)
    state = optim.setup(optim.chain(optim.WeightDecay(1e-4), optim.Adam(1e-3)), w)
    with pytest.raises(ValueError, match=r"^Adam: lr must be a finite number >= 0, got -0.5$"):
        optim.adjust(state, lr=-0.5)
    assert state.rule.rules[1].lr == 1e-3
    optim.update(state, w, np.ones(2))
    assert np.all(w < 1.0)

