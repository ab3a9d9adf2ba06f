"""The differential test of native replays: random array programs (`numpy_programs`) compiled and run
eagerly, 75 calls each with the native form built at the seventh, bit for bit with the same warnings and
exceptions, on inputs of every layout with zeros of both signs, infinities and NaNs among them."""
from __future__ import annotations

import pytest

from tests.compiled.numpy_programs import make_program
from tests.compiled.test_native_replay import compile_after_five_replays  # noqa: F401

QUICK_SEEDS = range(32)
SLOW_SEEDS = range(1000, 1600)


@pytest.mark.parametrize("seed", QUICK_SEEDS)
def test_a_compiled_random_program_is_the_eager_program(seed):
    assert make_program(seed).run() is None


@pytest.mark.slow
def test_six_hundred_more_random_programs_are_the_eager_programs():
    failures = [why for seed in SLOW_SEEDS if (why := make_program(seed).run()) is not None]
    assert not failures, f"{len(failures)} of {len(SLOW_SEEDS)} programs differ; the first: {failures[0]}"
