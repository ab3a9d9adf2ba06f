"""numpy's own ufunc loops run by the native runner: numpy's bits, numpy's checks, numpy's fast path only."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from minflux.runtime import native_runner
from minflux.schedule.native_loops import loop_command
from tests.runtime.test_native_runner import run, special_values

UNARY = [np.tanh, np.exp, np.log, np.sqrt, np.sin, np.negative, np.absolute, np.sign, np.floor, np.isfinite,
         np.logical_not, np.square, np.log1p, np.expm1]
BINARY = [np.power, np.maximum, np.minimum, np.fmax, np.arctan2, np.greater, np.less_equal, np.copysign,
          np.floor_divide, np.remainder, np.hypot]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fn", UNARY + BINARY, ids=lambda fn: fn.__name__)
@pytest.mark.parametrize("shape", [(5, 9), (37,), (), (2, 3, 4)])
def test_a_ufunc_call_is_numpys_loop_with_numpys_bits(fn, dtype, shape):
    rng = np.random.default_rng(3)
    args = [special_values(rng, shape, dtype) for _ in range(fn.nin)]
    with np.errstate(all="ignore"):
        want = np.asarray(fn(*args))
        out = np.empty_like(want)
        command = loop_command(fn)(tuple(args), {"out": out}, np.geterr())
        assert command is not None and command.words[0] == native_runner.LOOP
        assert run(command)[0] == -1
    assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("fn, args", [
    (np.power, lambda x: (x, 2)), (np.power, lambda x: (x, 0.5)), (np.maximum, lambda x: (x, np.float32(0.25))),
    (np.maximum, lambda x: (0.0, x)), (np.arctan2, lambda x: (x[::3], x[1::3])), (np.tanh, lambda x: (x[::2],))],
    ids=["int", "float", "numpy scalar", "number first", "strided", "strided unary"])
def test_numbers_and_strided_vectors_as_numpys_fast_path_takes_them(fn, args):
    x = special_values(np.random.default_rng(4), 30, np.float32)
    with np.errstate(all="ignore"):
        want = np.asarray(fn(*args(x)))
        out = np.empty_like(want)
        command = loop_command(fn)(args(x), {"out": out}, np.geterr())
        run(command)
    assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("shape", [(4, 6), ()])
def test_in_place_when_the_output_is_an_input_exactly(shape):
    x = np.array(special_values(np.random.default_rng(5), shape, np.float64) + 0.5)
    with np.errstate(all="ignore"):
        want = np.exp(x)
        command = loop_command(np.exp)((x,), {"out": x}, np.geterr())
        run(command)
    assert x.tobytes() == want.tobytes()
    assert command.words[8:10] == ([0, 8] if shape == () else [8, 8])   # numpy's strides: a 0-d input's is 0


@pytest.mark.parametrize("case", ["row broadcast", "column slice", "reversed", "overlap", "cast", "where", "dtype",
                                  "wide number", "two outputs", "unaligned", "integers"])
def test_a_call_numpy_would_iterate_otherwise_is_no_command(case):
    x, row = np.ones((4, 6), np.float32), np.ones(6, np.float32)
    out = np.empty((4, 6), np.float32)
    calls = {"row broadcast": (np.maximum, (x, row), {"out": out}),
             "column slice": (np.tanh, (x[:, :3],), {"out": out[:, :3]}),
             "reversed": (np.tanh, (row[::-1],), {"out": row.copy()}),
             "overlap": (np.tanh, (x[:3],), {"out": x[1:]}),
             "cast": (np.tanh, (x,), {"out": np.empty((4, 6))}),
             "where": (np.tanh, (x,), {"out": out, "where": x > 0}),
             "dtype": (np.tanh, (x,), {"out": out, "dtype": np.float64}),
             "wide number": (np.add, (np.ones(3, np.int8), 300), {"out": np.empty(3, np.int8)}),
             "two outputs": (np.divmod, (x, x), {"out": (out, out.copy())}),
             "unaligned": (np.tanh, (np.zeros(25, np.uint8)[1:].view(np.float32),), {"out": row}),
             "integers": (np.power, (np.arange(3), -1), {"out": np.empty(3, np.int64)})}
    fn, args, kwargs = calls[case]
    make = loop_command(fn)
    assert make is None or make(args, kwargs, np.geterr()) is None


def test_the_walk_stops_where_numpy_would_warn_and_runs_on_where_it_would_not():
    x, out = np.array([1.0, 1000.0], np.float32), np.empty(2, np.float32)
    with np.errstate(over="warn"):
        stopped = run(loop_command(np.exp)((x,), {"out": out}, np.geterr()))
    assert stopped[0] == 1
    with np.errstate(over="ignore"):
        assert run(loop_command(np.exp)((x,), {"out": out}, np.geterr()))[0] == -1
        assert out.tobytes() == np.exp(x).tobytes()


def test_a_loop_that_fails_stops_the_walk():
    failing = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 5)(lambda *a: -1)
    command = native_runner.loop_words(native_runner.function_address(failing), 0, 0, 1, (0, 0), (0, 0), 0, None)
    after = native_runner.copy_words(1, 8, (np.ones(1).ctypes.data, 0), (np.zeros(1).ctypes.data, 0))
    program = run(command, after)
    assert program[0] == 1
