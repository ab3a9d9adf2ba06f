"""The native runner's commands against the numpy calls they stand for, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

from minflux.runtime import native_runner
from minflux.schedule.native_numpy import COMMANDS
from minflux.schedule.traced import _method_caller


def run(*commands) -> np.ndarray:
    program = np.array([-1, *(w for c in commands for w in c.words)], np.int64)
    native_runner.run(program, 1, len(program))
    return program


def special_values(rng, shape, dtype):
    x = np.asarray(rng.normal(size=shape) * 3, dtype)
    x.flat[::7] = 0.0
    x.flat[1::11] = -0.0
    x.flat[2::13] = np.finfo(dtype).tiny / 4   # subnormal
    x.flat[3::17] = np.inf
    x.flat[4::19] = -np.inf
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", [np.add, np.subtract, np.multiply, np.true_divide])
@pytest.mark.parametrize("shapes", [((5, 9), (5, 9)), ((5, 9), (9,)), ((5, 9), (5, 1)), ((5, 1), (5, 9)),
                                    ((4, 3, 6), (6,)), ((7,), ()), ((), ())])
def test_elementwise_commands_give_numpys_bits(fn, dtype, shapes):
    rng = np.random.default_rng(0)
    a, b = (special_values(rng, s, dtype) for s in shapes)
    with np.errstate(all="ignore"):
        want = np.asarray(fn(a, b))
        out = np.empty_like(want)
        command = COMMANDS[fn]((a, b), {"out": out}, np.geterr())
        run(command)
    assert command is not None and command.words[-1] == 0   # numpy's checks are off here: none asked
    assert out.tobytes() == want.tobytes()


def test_an_elementwise_command_on_strided_rows_and_a_python_number():
    rng = np.random.default_rng(1)
    wide = rng.normal(size=(6, 20)).astype(np.float32)
    a = wide[:, 3:11]                      # rows 20 apart
    out = np.empty((6, 8), np.float32)
    command = COMMANDS[np.multiply]((a, 0.1), {"out": (out,)}, np.geterr())
    run(command)
    assert out.tobytes() == np.multiply(a, 0.1).tobytes()
    assert COMMANDS[np.add]((wide[:, :16:2], a), {"out": out}, np.geterr()) is None   # columns apart: numpy's
    assert COMMANDS[np.add]((wide[:, :8], wide[:, 1:9]), {"out": wide[:, 2:10]}, np.geterr()) is None   # overlaps


def test_an_elementwise_command_stops_where_numpy_would_warn():
    a, zero = np.ones(4), np.zeros(4)
    out = np.empty(4)
    with np.errstate(divide="warn"):
        command = COMMANDS[np.true_divide]((a, zero), {"out": out}, np.geterr())
    program = run(command)
    assert program[0] == 1 and np.isinf(out).all()
    with np.errstate(divide="ignore"):
        command = COMMANDS[np.true_divide]((a, zero), {"out": out}, np.geterr())
    assert run(command)[0] == -1


def spread(rng, shape, dtype):
    """Values of many magnitudes and both signs (so that the order of a sum shows in its bits), some
    zeros of both signs."""
    x = np.asarray(rng.normal(size=shape) * 10.0 ** rng.integers(-4, 5, size=shape), dtype)
    x.flat[::9] = 0.0
    x.flat[1::13] = -0.0
    return x


SUM = _method_caller("sum")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [-1, 0])
def test_sums_give_numpys_bits_for_every_row_length(axis, dtype):
    """Along the inner axis numpy sums pairwise (in 8 running sums up to 128 elements, split above),
    across it in order of the rows: every length up to three splits deep."""
    rng = np.random.default_rng(5)
    for n in [*range(2, 140), 255, 256, 257, 300, 512, 513, 1000, 1030, 2049]:
        a = spread(rng, (3, n) if axis == -1 else (n, 3), dtype)
        out = np.empty(3, dtype)
        command = COMMANDS[SUM]((a,), {"axis": (axis,), "out": out}, np.geterr())
        run(command)
        assert out.tobytes() == a.sum(axis=axis).tobytes(), n


@pytest.mark.parametrize("axis, keepdims", [((2,), True), ((1, 2), False), ((0, 1), True), ((0,), False)])
def test_a_sum_over_several_axes_and_all_zeros(axis, keepdims):
    rng = np.random.default_rng(6)
    for a in (spread(rng, (4, 5, 6), np.float32), np.full((4, 5, 6), -0.0, np.float32)):
        want = a.sum(axis=axis, keepdims=keepdims)
        out = np.empty_like(want)
        run(COMMANDS[SUM]((a,), {"axis": axis, "keepdims": keepdims, "out": out}, np.geterr()))
        assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", [np.sum, np.mean])
def test_a_sum_or_mean_of_every_element_gives_numpys_bits(fn, dtype):
    """numpy sums every element of a C-contiguous array pairwise from its identity 0 (a single element
    too), whatever its shape; its mean divides that sum by the count."""
    rng = np.random.default_rng(7)
    for n in [*range(1, 140), 255, 256, 257, 1000, 4096, 8192]:
        for x in (spread(rng, n, dtype), np.full(n, -0.0, dtype)):
            for a, axis in ((x, None), (x.reshape(1, n), (0, 1)), (x.reshape(-1, 2) if n % 2 == 0 else x, None)):
                out = np.empty((), dtype)
                run(COMMANDS[fn]((a,), {"axis": axis, "out": out}, np.geterr()))
                assert out.tobytes() == np.asarray(fn(a, axis=axis)).tobytes(), (n, a.shape)


@pytest.mark.parametrize("axis, keepdims", [((2,), False), ((0,), True), ((1, 2), False), ((0, 1), True)])
def test_a_mean_over_leading_or_trailing_axes_gives_numpys_bits(axis, keepdims):
    rng = np.random.default_rng(8)
    for dtype in (np.float32, np.float64):
        a = spread(rng, (6, 7, 5), dtype)
        want = np.mean(a, axis=axis, keepdims=keepdims)
        out = np.empty_like(want)
        run(COMMANDS[np.mean]((a,), {"axis": axis, "keepdims": keepdims, "out": out}, np.geterr()))
        assert out.tobytes() == want.tobytes()


def test_ones_and_zeros_like_copy_numpys_bytes():
    for fn in (np.ones_like, np.zeros_like):
        for out in (np.empty((3, 4), np.float32), np.empty((), np.float64), np.empty(5, np.int64)):
            run(COMMANDS[fn]((out.copy(),), {"out": out}, {}))
            assert out.tobytes() == fn(out).tobytes()
    assert COMMANDS[np.ones_like]((np.ones(3),), {}, {}) is None   # no array to fill


def test_a_sum_numpy_would_do_otherwise_is_no_command():
    a, out = np.ones((4, 6)), np.empty(6)
    assert COMMANDS[SUM]((a,), {"axis": 1, "out": np.empty(4)}, np.geterr()) is not None
    assert COMMANDS[SUM]((a.T,), {"axis": 1, "out": out}, np.geterr()) is None             # not C-contiguous
    assert COMMANDS[SUM]((np.ones((4, 5, 6)),), {"axis": 1, "out": np.empty((4, 6))}, {}) is None   # a middle axis
    assert COMMANDS[SUM]((a,), {"axis": 0, "dtype": np.float32, "out": out}, {}) is None
    assert COMMANDS[SUM]((np.ones((1, 6)),), {"axis": 0, "out": out}, {}) is None          # one row: a copy


def test_a_sum_stops_where_numpy_would_warn_of_overflow():
    a, out = np.full((2, 3), 3e38, np.float32), np.empty(2, np.float32)
    with np.errstate(over="warn"):
        program = run(COMMANDS[SUM]((a,), {"axis": 1, "out": out}, np.geterr()))
    assert program[0] == 1


def test_a_concatenation_is_copies_of_rows():
    rng = np.random.default_rng(2)
    parts = [rng.normal(size=(3, n, 2)) for n in (4, 1, 3)]
    for axis in (0, 1, 2, -1):
        want = np.concatenate([p if axis == 1 else parts[0] for p in parts], axis=axis)
        arrays = [p if axis == 1 else parts[0] for p in parts]
        out = np.empty_like(want)
        run(COMMANDS[np.concatenate]((arrays,), {"axis": axis, "out": out}, {}))
        assert out.tobytes() == want.tobytes()
    transposed = [parts[0].T.copy().T]   # not C-contiguous: numpy's own
    assert COMMANDS[np.concatenate]((transposed,), {"out": np.empty((3, 4, 2))}, {}) is None


def test_the_runner_loads_on_a_thread_of_its_own(monkeypatch):
    loaded = native_runner.load_runner()
    monkeypatch.setattr(native_runner, "_runner", None)
    monkeypatch.setattr(native_runner, "_loading", None)
    assert native_runner.runner_ready() is False
    native_runner._loading.join(timeout=120)
    assert native_runner.runner_ready() is True and native_runner._runner is not None
    assert native_runner.function_address(native_runner._runner) == native_runner.function_address(loaded)


def test_a_process_that_ends_while_the_runner_compiles_waits_for_it_and_keeps_it(tmp_path):
    """LLVM's own state is torn down as a process ends; a compile still running on its thread then
    could crash the process. The runner's compile is waited for instead, and its code saved."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MINFLUX_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", "from minflux.runtime import native_runner as n; n.runner_ready()"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert any(path.is_file() for path in tmp_path.rglob("*")), "the runner's code was not saved"


@pytest.mark.parametrize("fn", [np.add, np.subtract, np.multiply])
def test_int64_commands_wrap_around_as_numpy_does(fn):
    rng = np.random.default_rng(3)
    a = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, size=(4, 6), dtype=np.int64)
    b = np.concatenate([rng.integers(-9, 9, size=(4, 3)), np.full((4, 3), np.iinfo(np.int64).max)], axis=1)
    for x, y in ((a, b), (a, b[:1]), (a, 7)):
        out = np.empty((4, 6), np.int64)
        run(COMMANDS[fn]((x, y), {"out": out}, np.geterr()))
        assert out.tobytes() == fn(x, y).tobytes()
