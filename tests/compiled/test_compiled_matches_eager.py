"""The differential test of `mf.compile`: random training steps, compiled and eager, 72 calls each,
bit for bit (results, model, optimiser state and counters), while the inputs' layouts, a closure's
setting, a module global and numpy's error state change between calls (`step_programs`)."""
from __future__ import annotations

import pytest

from step_programs import make_program

pytestmark = pytest.mark.numpy_kernels   # the programs' values, not numba's kernels (tested apart)

QUICK_SEEDS = range(24)
SLOW_SEEDS = range(1000, 1400)


@pytest.mark.parametrize("seed", QUICK_SEEDS)
def test_a_compiled_random_step_is_the_eager_step(seed):
    assert make_program(seed).run(calls=72) is None


@pytest.mark.slow
def test_four_hundred_more_random_steps_are_the_eager_step():
    failures = [why for seed in SLOW_SEEDS if (why := make_program(seed).run(calls=72)) is not None]
    assert not failures, f"{len(failures)} of {len(SLOW_SEEDS)} programs differ; the first: {failures[0]}"
