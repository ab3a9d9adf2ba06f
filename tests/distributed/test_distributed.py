"""`minflux.distributed` on one process in-process, and on two local ranks under ``mpiexec``.

The two-rank results are compared with formulas that do not use the code under test: with two ranks
the float32 mean ``(a0 + a1) / 2`` is the same whatever the order of the addition, so the allreduce
must equal it bit for bit.
"""
import pickle
import sys
from pathlib import Path

import numpy as np
import pytest

import minflux.backend as backend
from minflux import _flat_buffers, distributed

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_device import FakeDeviceArray, fake_cupy_module  # noqa: E402
from mpi_checks import inputs  # noqa: E402
from mpi_launch import launch  # noqa: E402

CHECKS = Path(__file__).with_name("mpi_checks.py")


def two_ranks(check, tmp_path, env=None):
    out = tmp_path / f"{check}.pkl"
    done = launch(2, CHECKS, check, out, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    result = pickle.loads(out.read_bytes())
    assert result["size"] == 2
    return result["ranks"]


def expected_mean():
    a0, a1 = inputs(0), inputs(1)
    return {k: (a0[k] + a1[k]) / a0[k].dtype.type(2) for k in a0 if isinstance(a0[k], np.ndarray)}


# -- one process ---------------------------------------------------------------------------------

def test_one_process_is_rank_zero_of_one_and_returns_trees_unchanged():
    tree = {"W": np.ones(2), "b": None}
    assert (distributed.rank(), distributed.size(), distributed.is_main()) == (0, 1, True)
    assert distributed.allreduce_tree(tree) is tree
    assert distributed.broadcast_tree(tree) is tree
    assert distributed.gather_rows(tree) is tree
    distributed.barrier()


def test_under_a_launcher_without_mpi4py_the_error_names_the_extra(monkeypatch):
    monkeypatch.setattr(distributed, "_world", None)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now fails
    monkeypatch.setenv("PMI_SIZE", "4")
    with pytest.raises(RuntimeError, match=r"4 processes.*minflux\[mpi\]"):
        distributed.init()
    monkeypatch.delenv("PMI_SIZE")
    for name in distributed.LAUNCHER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    distributed.init()  # no launcher: one process, mpi4py never needed
    assert distributed.size() == 1


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="op must be one of mean, sum, max, min"):
        distributed.allreduce_tree({"W": np.ones(1)}, op="avg")


def test_cupy_arrays_take_the_nccl_path_and_mixed_trees_are_refused(monkeypatch):
    fake = fake_cupy_module()
    monkeypatch.setattr(backend, "_cupy", fake)
    device = np.ones(3, np.float32).view(FakeDeviceArray)
    assert _flat_buffers.array_module([device, device], "allreduce_tree") is fake
    assert _flat_buffers.array_module([np.ones(3)], "allreduce_tree") is np
    with pytest.raises(backend.DeviceError, match="numpy and CuPy arrays in one tree"):
        _flat_buffers.array_module([device, np.ones(3)], "allreduce_tree")


# -- two ranks -----------------------------------------------------------------------------------

def test_allreduce_mean_is_exact_identical_on_every_rank_and_keeps_the_tree(tmp_path):
    ranks = two_ranks("reduce", tmp_path)
    want = expected_mean()
    for got in ranks:
        for which in ("small", "default", "again"):
            tree = got[which]
            assert tree["none"] is None and tree["config"] == "static"
            for k, v in want.items():
                assert tree[k].dtype == v.dtype and tree[k].shape == v.shape, (which, k)
                np.testing.assert_array_equal(tree[k], v, err_msg=f"{which} {k}")
        assert got["tied"] and got["inputs_kept"]
        np.testing.assert_array_equal(got["counts"]["n"], np.arange(5) * 3)
        np.testing.assert_array_equal(got["largest"]["x"], [1, 0])


def test_a_compiled_data_parallel_step_replays_bit_identical_to_its_eager_run(tmp_path):
    ranks = two_ranks("compiled_step", tmp_path)
    for got in ranks:
        assert got["recordings"] == 1 and got["replays"] == 71   # the allreduce is one recorded operation
        compiled, eager = got["runs"]["compiled"], got["runs"]["eager"]
        for a, b in zip(compiled["losses"] + compiled["leaves"], eager["losses"] + eager["leaves"]):
            assert a.dtype == b.dtype and a.tobytes() == b.tobytes()
    # every rank averaged the same losses and gradients, so all hold the same parameters
    for a, b in zip(ranks[0]["runs"]["compiled"]["leaves"], ranks[1]["runs"]["compiled"]["leaves"]):
        assert a.tobytes() == b.tobytes()
    assert ranks[0]["runs"]["compiled"]["losses"][0] == ranks[1]["runs"]["compiled"]["losses"][0]


def test_broadcast_gives_root_values_and_a_mismatch_fails_on_every_rank(tmp_path):
    ranks = two_ranks("broadcast", tmp_path)
    for got in ranks:
        np.testing.assert_array_equal(got["got"]["p"], np.zeros(3))
        np.testing.assert_array_equal(got["got"]["q"][0], [0, 1])
        assert "('p', (4,), '<f8') on rank 1, ('p', (3,), '<f8') on rank 0" in got["error"]


def test_gather_rows_concatenates_in_rank_order_on_root(tmp_path):
    root, other = two_ranks("gather", tmp_path)
    assert other["gathered"] is None
    state = root["gathered"][0]
    np.testing.assert_array_equal(state["h"], np.repeat([[0.0], [1.0]], 2, axis=0) * np.ones((4, 3)))
    np.testing.assert_array_equal(state["c"][:, 0], [0, 1, 10, 11])


def test_ranks_share_the_cores_unless_the_thread_budget_is_set(tmp_path):
    from minflux.runtime.threads import usable_cores

    shared = two_ranks("threads", tmp_path, env={"MINFLUX_NUM_THREADS": None})
    assert [r["threads"] for r in shared] == [max(1, usable_cores() // 2)] * 2
    fixed = two_ranks("threads", tmp_path, env={"MINFLUX_NUM_THREADS": "3"})
    assert [r["threads"] for r in fixed] == [3, 3]


def test_device_arrays_are_reduced_through_nccl_with_the_id_from_mpi(tmp_path):
    want = expected_mean()
    for got in two_ranks("nccl", tmp_path):
        assert got["uids"] == [("nccl-id", 1234)]  # rank 0's id, carried by MPI, one communicator
        assert set(got["calls"]) == {"reduceScatter", "allGather", "bcast"}
        assert got["calls"].count("reduceScatter") == got["calls"].count("allGather") > 2  # buckets
        for k, v in want.items():
            assert got["types"][k] == "FakeDeviceArray", k  # results stay on the device
            np.testing.assert_array_equal(got["reduced"][k], v, err_msg=k)
            np.testing.assert_array_equal(got["reduced"][k], got["on_host"][k], err_msg=k)
        assert got["tied"] and got["types"]["none"] == "NoneType"
        np.testing.assert_array_equal(got["broadcast"], np.zeros(3, np.float32))


@pytest.mark.slow
def test_a_rank_that_stops_answering_ends_the_job_with_a_message(tmp_path):
    # 5 s: long enough that start-up collectives of a slow (loaded) rank finish in time, far below the sleep
    # A second try only when the launcher forwarded nothing at all (under heavy load MPICH can lose an
    # aborting rank's output); a wrong or missing message in what it did forward still fails.
    for _ in range(2):
        done = launch(2, CHECKS, "watchdog", tmp_path / "w.pkl", env={"CHECK_TIMEOUT": "5"}, timeout=90)
        if done.stderr:
            break
    assert done.returncode != 0
    assert "rank 0 of 2: barrier did not finish within 5 s" in done.stderr
    assert "Aborting the whole job" in done.stderr
    assert not (tmp_path / "w.woke").exists()  # rank 1 was ended in its 40 s sleep, not waited for
    assert not (tmp_path / "w.pkl").exists()
