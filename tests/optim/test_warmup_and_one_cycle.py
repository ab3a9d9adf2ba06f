"""LinearWarmup and OneCycle against their formulas and, where installed, torch.optim.lr_scheduler."""
from __future__ import annotations

import math

import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def torch_rates(make_scheduler, steps, lr):
    torch = pytest.importorskip("torch")
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=lr)
    scheduler = make_scheduler(torch, opt)
    rates = []
    for _ in range(steps):
        rates.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return rates


def test_linear_warmup_formula_and_after():
    s = mf.optim.LinearWarmup(lr=0.2, warmup=5, start_factor=0.5, after=mf.optim.StepDecay(0.2, 2, 0.5))
    want = [0.2 * (0.5 + 0.5 * t / 5) for t in range(5)] + [0.2, 0.2, 0.1, 0.1, 0.05]
    assert [s(t) for t in range(10)] == pytest.approx(want, rel=1e-15)


def test_linear_warmup_matches_torch_linear_lr():
    s = mf.optim.LinearWarmup(lr=0.3, warmup=7, start_factor=0.25)
    want = torch_rates(lambda torch, opt: torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.25,
                                                                          total_iters=7), 12, 0.3)
    assert [s(t) for t in range(12)] == pytest.approx(want, rel=1e-12)


def test_linear_warmup_state_round_trips_with_its_after_schedule():
    s = mf.optim.LinearWarmup(lr=1.0, warmup=3, after=mf.optim.ReduceOnPlateau(lr=1.0))
    s.after.step(1.0)
    s.after.step(2.0)
    fresh = mf.optim.LinearWarmup(lr=1.0, warmup=3, after=mf.optim.ReduceOnPlateau(lr=1.0))
    fresh.load_state_dict(s.state_dict())
    assert fresh.after.lr == s.after.lr == 0.02 and fresh(10) == 0.02
    with pytest.raises(ValueError, match="'after' schedule"):
        mf.optim.LinearWarmup(lr=1.0, warmup=3).load_state_dict(s.state_dict())


@pytest.mark.parametrize("anneal", ["cos", "linear"])
@pytest.mark.parametrize("three_phase", [False, True])
@pytest.mark.parametrize("total,pct", [(20, 0.3), (37, 0.25), (10, 0.5)])
def test_one_cycle_matches_torch(total, pct, anneal, three_phase):
    s = mf.optim.OneCycle(lr=0.5, total=total, pct_start=pct, anneal=anneal, three_phase=three_phase,
                          div_factor=10.0, final_div_factor=100.0)
    want = torch_rates(lambda torch, opt: torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=0.5, total_steps=total, pct_start=pct, anneal_strategy=anneal, three_phase=three_phase,
        div_factor=10.0, final_div_factor=100.0, cycle_momentum=False), total, 0.5)
    assert [s(t) for t in range(total)] == pytest.approx(want, rel=1e-12)


def test_one_cycle_shape_without_torch():
    s = mf.optim.OneCycle(lr=1.0, total=101, pct_start=0.2)
    assert s(0) == pytest.approx(1 / 25)
    peak = 0.2 * 101 - 1
    assert max(s(t) for t in range(101)) == pytest.approx(s(math.ceil(peak)), rel=1e-3)
    assert s(100) == pytest.approx(1 / 25 / 1e4) and s(1000) == s(100)
    rates = [s(t) for t in range(101)]
    top = rates.index(max(rates))
    assert all(a <= b for a, b in zip(rates[:top], rates[1:top + 1]))
    assert all(a >= b for a, b in zip(rates[top:], rates[top + 1:]))


def test_one_cycle_checks_its_arguments():
    with pytest.raises(ValueError, match="pct_start"):
        mf.optim.OneCycle(lr=1.0, total=10, pct_start=1.0)
    with pytest.raises(ValueError, match="anneal"):
        mf.optim.OneCycle(lr=1.0, total=10, anneal="exp")
