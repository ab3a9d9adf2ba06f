"""Learning-rate schedules against hand-computed values; use with optim.adjust."""
import math

import numpy as np
import pytest

from minflux import optim

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_step_decay():
    s = optim.StepDecay(lr=0.8, step_size=3, gamma=0.5)
    assert [s(t) for t in range(8)] == [0.8, 0.8, 0.8, 0.4, 0.4, 0.4, 0.2, 0.2]


def test_exponential_decay_with_floor():
    s = optim.ExponentialDecay(lr=2.0, gamma=0.5, lr_min=0.3)
    assert [s(t) for t in range(5)] == [2.0, 1.0, 0.5, 0.3, 0.3]


def test_cosine_with_warmup():
    s = optim.CosineDecay(lr=1.0, total=6, lr_min=0.1, warmup=2)
    # warm-up 0.5, 1.0; then p = 0, 1/4, 1/2, 3/4, 1 over the remaining 4 steps
    want = [0.5, 1.0, 1.0, 0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2, 0.55,
            0.1 + 0.9 * (1 + math.cos(3 * math.pi / 4)) / 2, 0.1, 0.1]
    np.testing.assert_allclose([s(t) for t in range(8)], want, rtol=1e-15)


def test_reduce_on_plateau_divides_by_fifty():
    s = optim.ReduceOnPlateau(lr=1.0)
    assert s.step(2.0) == 1.0          # first value: the best so far
    assert s.step(1.9) == 1.0          # improved
    assert s.step(1.95) == 0.02        # no improvement: lr / 50
    assert s.step(1.90) == 0.0004      # 1.90 is not below the best 1.9
    assert s.step(1.5) == 0.0004 and s.best == 1.5 and s.reductions == 2


def test_reduce_on_plateau_patience_threshold_and_max_mode():
    s = optim.ReduceOnPlateau(lr=1.0, factor=0.5, patience=1, threshold=0.1, mode="max", lr_min=0.3)
    # 1.0 best; 1.05 not above 1.0 * 1.1 (bad 1); 1.2 improves (best 1.2); 1.0 bad 1; 1.0 bad 2 > patience:
    # lr 0.5; 1.0 bad 1; 1.0 bad 2: lr max(0.25, 0.3) = 0.3
    assert [s.step(v) for v in [1.0, 1.05, 1.2, 1.0, 1.0, 1.0, 1.0]] == [1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.3]
    assert s.best == 1.2 and s.reductions == 2


def test_reduce_on_plateau_threshold_is_relative_to_the_magnitude_of_negative_values():
    """best = -10, threshold 0.1: an improvement is below -11 (not below -10 * 0.9 = -9)."""
    s = optim.ReduceOnPlateau(lr=1.0, factor=0.5, threshold=0.1)
    assert [s.step(v) for v in [-10.0, -10.5, -11.5]] == [1.0, 0.5, 0.5]
    assert s.best == -11.5 and s.reductions == 1
    s = optim.ReduceOnPlateau(lr=1.0, factor=0.5, threshold=0.1, mode="max")
    assert [s.step(v) for v in [-10.0, -9.5, -8.5]] == [1.0, 0.5, 0.5] and s.best == -8.5


def test_schedules_round_trip_their_state():
    s = optim.ReduceOnPlateau(lr=1.0)
    s.step(1.0), s.step(2.0)
    fresh = optim.ReduceOnPlateau(lr=1.0)
    fresh.load_state_dict(s.state_dict())
    assert fresh == s and fresh.lr == 0.02
    with pytest.raises(ValueError, match="unknown keys"):
        fresh.load_state_dict({"eta": 1})


def test_schedule_drives_adjust():
    x = np.array([0.0])
    state = optim.setup(optim.Descent(), x)
    s = optim.StepDecay(lr=1.0, step_size=1, gamma=0.5)
    for t in range(3):
        optim.adjust(state, lr=s(t))
        optim.update(state, x, np.array([1.0]))
    np.testing.assert_array_equal(x, [-1.75])
