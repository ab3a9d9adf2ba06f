"""`benchmarks/parallel_bound.py` schedules a native form's commands over their dependencies: its list
schedule against schedules worked out by hand, and the commands it takes from a native form."""
import sys
from pathlib import Path

import numpy as np
import pytest

import minflux as mf
from minflux.schedule import native
from tests.compiled.test_native_replay import compile_after_five_replays, native_form  # noqa: F401

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import parallel_bound  # noqa: E402

# a diamond: 0 before 1 and 2, both before 3
DIAMOND = [(2.0, 1, ()), (3.0, 1, (0,)), (1.0, 1, (0,)), (1.0, 1, (1, 2))]


@pytest.mark.parametrize("workers, wake, seconds", [
    (1, 0.0, 7.0),    # one after the other
    (2, 0.0, 6.0),    # 2, then 3 beside 1, then 1
    (2, 0.5, 6.0),    # the woken worker runs the 1 s branch by 3.5 s, before the 3 s one is done
    (2, 2.5, 6.5),    # the 1 s branch starts first on the woken worker (4.5 s) and delays the join
    (8, 0.0, 6.0),    # the critical path 2 + 3 + 1
])
def test_a_diamond_takes_its_critical_path_on_two_workers_and_all_its_work_on_one(workers, wake, seconds):
    assert parallel_bound.list_schedule([DIAMOND], workers, wake) == pytest.approx(seconds)


def test_a_command_cut_into_shares_waits_for_every_worker_and_segments_add_up():
    busy = [(4.0, 1, ()), (1.0, 1, ()), (2.0, 2, ())]   # the shares wait for the 4 s command's worker
    assert parallel_bound.list_schedule([busy], 2) == pytest.approx(5.0)
    assert parallel_bound.list_schedule([busy], 2, wake=0.25) == pytest.approx(5.25)
    assert parallel_bound.list_schedule([busy], 1) == pytest.approx(7.0)
    assert parallel_bound.list_schedule([busy, DIAMOND], 2) == pytest.approx(11.0)


def folded(x):
    return x * x if x > 0 else -x


def product_kernel_tanh(a, b):
    return mf.sum(mf.tanh(mf.broadcast(folded, mf.matmul(a, b))))


def test_the_commands_of_a_native_form_each_wait_on_the_one_whose_result_they_read(monkeypatch):
    monkeypatch.setattr(native.NativeForm, "_segments", native.NativeForm._segments)   # put back after
    seen = parallel_bound._native_parts_seen()
    rng = np.random.default_rng(0)
    step = mf.compile(product_kernel_tanh)
    for _ in range(10):
        step(rng.normal(size=(6, 5)).astype(np.float32), rng.normal(size=(5, 7)).astype(np.float32))
    form = native_form(step)
    assert form is not None and form.n_commands == 4
    (segment,) = parallel_bound.segments_of(form, seen, 2)
    assert len(segment) == 4 and all(seconds >= 0 and shares == 1 for seconds, shares, _ in segment)
    assert all(j - 1 in segment[j][2] for j in (1, 2, 3))   # product, kernel, tanh, sum: each reads the last
