"""Recording array operations and replaying them: values against numpy, and every refusal."""
from __future__ import annotations

import contextvars
import time
import weakref

import numpy as np
import pytest

import minflux as mf
from minflux.schedule import NotReplayable, Recording, Replay
from minflux.schedule.replay import COMPILE_AFTER


def replayed(fn, *arrays):
    """``fn`` recorded on ``arrays`` and replayed on fresh ones; returns (recorded, replayed, source)."""
    rec = Recording("f")
    traced = [rec.input(a.copy()) for a in arrays]
    out = fn(*traced)
    outs = list(out) if isinstance(out, tuple) else [out]
    recorded = [o.recorded_value for o in outs]
    replay = Replay(rec, [o.slot for o in outs])
    rec.close()
    return recorded, replay([a.copy() for a in arrays]), replay.source


def operations(x, w, i):
    y = np.tanh(x @ w) * 2.0 + 1.0
    y[:, 0] = -y[:, 1]                          # a write into a recorded array
    y += x[:, :1]                               # in place
    z = np.concatenate([y, y.T[:2].T], axis=1).reshape(-1)
    return z.sum(), np.maximum(y, 0.5).mean(axis=0), y[i], np.where(y > 1.0, y, 0.0)


def test_a_replay_computes_what_numpy_computes_on_new_data():
    rng = np.random.default_rng(0)
    x, w, i = rng.normal(size=(5, 3)), rng.normal(size=(3, 4)), np.array([4, 0, 0])
    _, first, _ = replayed(operations, x, w, i)
    x2, w2, i2 = rng.normal(size=(5, 3)), rng.normal(size=(3, 4)), np.array([1, 2, 3])
    rec = Recording("f")
    traced = [rec.input(a) for a in (x, w, i)]
    outs = operations(*traced)
    replay = Replay(rec, [o.slot for o in outs])
    for got, expected in zip(replay([x2, w2, i2]), operations(x2.copy(), w2.copy(), i2)):
        np.testing.assert_array_equal(got, expected)
    for got, expected in zip(first, operations(x.copy(), w.copy(), i)):
        np.testing.assert_array_equal(got, expected)


def test_slots_are_freed_after_their_last_use_and_unused_results_at_once():
    def f(x):
        np.sin(x)                         # never used
        return np.exp(np.exp(x)) + 1.0

    _, _, source = replayed(f, np.ones(3))
    lines = [line.strip() for line in source.splitlines()]
    sine = next(line for line in lines if line.startswith("v1 = "))
    assert lines[lines.index(sine) + 1] == "del v1"
    assert lines[lines.index(next(line for line in lines if line.startswith("v2 = "))) + 1] == "del v0"
    assert source.count("del ") == 4      # the sine, x, and each exp after its one use


def test_both_forms_of_a_replay_free_an_array_after_its_last_use(replays_counted_not_timed):
    made = []

    @mf.operation
    def fresh(x):
        y = x + 1.0
        made.append(weakref.ref(y))
        return y

    @mf.operation
    def alive(x):
        return np.array(sum(r() is not None for r in made))

    def f(x):
        a = fresh(x)
        b = fresh(a)                      # the last use of a
        return alive(b), b

    rec = Recording("f")
    outs = f(rec.input(np.zeros(2)))
    replay = Replay(rec, [o.slot for o in outs])
    rec.close()
    for call in range(COMPILE_AFTER + 2):
        made.clear()
        count, b = replay([np.zeros(2)])
        assert (int(count), replay.replays) == (1, min(call + 1, COMPILE_AFTER + 1)), call
        np.testing.assert_array_equal(b, [2.0, 2.0])


@pytest.mark.parametrize("read, how", [(bool, "bool"), (float, "float"), (int, "int"),
                                       (lambda t: t.item(), ".item()"), (np.asarray, "converts an array"),
                                       (lambda t: t.ctypes, ".ctypes"), (lambda t: range(t), "as an index"),
                                       (lambda t: f"{t}", "format")])
def test_every_host_read_is_refused_with_the_line(read, how):
    rec = Recording("step")
    t = rec.input(np.ones(()))
    with pytest.raises(NotReplayable) as error:
        read(t)
    message = str(error.value)
    assert how in message and "test_schedule.py" in message and "mf.compile(step)" in message


def test_a_result_whose_size_depends_on_the_data_is_refused_at_its_call():
    rec = Recording("f")
    t = rec.input(np.array([0.0, 1.0, 2.0]))
    with pytest.raises(NotReplayable, match="boolean mask"):
        t[t > 0.5]
    with pytest.raises(NotReplayable, match="np.flatnonzero, whose result's size depends on the data"):
        np.flatnonzero(t)
    np.testing.assert_array_equal(t[np.array([True, False, True])].recorded_value, [0.0, 2.0])   # a constant mask


def test_writing_into_an_array_the_recording_does_not_follow_is_refused():
    rec = Recording("f")
    t = rec.input(np.ones(3))
    with pytest.raises(NotReplayable, match="does not follow"):
        np.add(t, 1.0, out=np.empty(3))


def test_a_recorded_array_kept_past_its_recording_is_refused():
    rec = Recording("f")
    t = rec.input(np.ones(3))
    rec.close()
    with pytest.raises(NotReplayable, match="after its recording ended"):
        t + 1


def test_an_operation_decides_on_the_data_again_at_every_replay():
    calls = []

    @mf.operation
    def normalise_if_large(x):
        calls.append(1)
        total = float(np.abs(x).sum())
        return x / total if total > 1.0 else x

    rec = Recording("f")
    out = normalise_if_large(rec.input(np.array([0.25, 0.25])))
    replay = Replay(rec, [out.slot])
    np.testing.assert_array_equal(replay([np.array([0.25, 0.25])])[0], [0.25, 0.25])
    np.testing.assert_array_equal(replay([np.array([3.0, 1.0])])[0], [0.75, 0.25])
    assert len(calls) == 3


def test_an_operation_returning_a_python_number_is_refused():
    @mf.operation
    def largest(x):
        return float(x.max())

    with pytest.raises(NotReplayable, match="gets a float from largest"):
        largest(Recording("f").input(np.ones(2)))


def test_a_recorded_array_counts_as_the_array_it_stands_for():
    rec = Recording("f")
    t, s = rec.input(np.ones((2, 3), np.float32)), rec.input(np.ones((), np.float32)).sum()
    assert mf.is_array(t) and mf.get_array_module(t) is np and t.shape == (2, 3) and t.dtype == np.float32
    assert not mf.is_array(s)        # a numpy scalar, as eagerly: not an array leaf of a tree
    assert t.T.shape == (3, 2) and len(t) == 2 and [row.shape for row in t] == [(3,), (3,)]


@pytest.mark.parametrize("compile_after", [COMPILE_AFTER, 0], ids=["program", "straight-line"])
def test_a_replay_sets_numpys_error_state_where_the_recording_changed_it(monkeypatch, compile_after):
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", compile_after)

    def f(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            quiet = np.log(x)
        with np.errstate(divide="raise"):
            loud = np.log(x + 1.0)
        return quiet, loud

    rec = Recording("f")
    outs = f(rec.input(np.array([1.0, 2.0])))
    replay = Replay(rec, [o.slot for o in outs])
    rec.close()
    before = np.geterr()
    quiet, loud = replay([np.array([0.0, 1.0])])
    assert quiet[0] == -np.inf and loud[0] == 0.0
    with pytest.raises(FloatingPointError):
        replay([np.array([-1.0, 1.0])])                   # log(0) in the block that raises
    assert np.geterr() == before                          # and the caller's state is back


def test_the_error_state_is_read_whatever_else_the_context_holds():
    holder = contextvars.ContextVar("holder")
    rec = Recording("f")
    x = rec.input(np.ones(2))
    holder.set(np.zeros(3))
    y = x + 1.0
    holder.set(np.ones(3))      # the contexts now differ by an array, which does not compare to a bool
    z = y * 2.0
    with np.errstate(over="ignore"):
        np.exp(z)
    rec.close()
    states = [dict(step.errstate) for step in rec.steps]
    assert states[0] == states[1] == np.geterr() and states[2] == {**np.geterr(), "over": "ignore"}


class Clock:
    """The replay's clock: it moves only when a slow operation says so."""

    def __init__(self):
        self.seconds = 0.0

    def thread_time(self) -> float:
        return self.seconds


clock = Clock()


@mf.operation(results="new")
def slow_double(x):
    """Twice ``x``, taking 5 ms of `clock`'s time: a schedule whose program replays are slow."""
    clock.seconds += 0.005
    return x * 2.0


@pytest.mark.parametrize("slow, compiled_after", [(True, 1), (False, 5)])
def test_a_replay_compiles_once_its_program_has_taken_what_compiling_would(slow, compiled_after, monkeypatch):
    """Three operations: 1.8 ms of program replays before compiling. A program replay of 5 ms compiles
    at the next replay; one that takes no time runs until `COMPILE_AFTER` (5 here). Every call gives
    the eager bits. The replay reads `clock`, so a loaded machine cannot change when it compiles."""
    from minflux.runtime.native_runner import load_runner

    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", 5)
    monkeypatch.setattr("minflux.schedule.replay.time", clock)
    load_runner()

    def f(x):
        y = np.add(x, 1.0)
        return np.multiply(slow_double(y) if slow else np.negative(y), 3.0)

    step, rng = mf.compile(f), np.random.default_rng(0)
    for k in range(72):
        x = rng.normal(size=4)
        assert step(x).tobytes() == f(x).tobytes(), f"call {k}"
    (entry,) = step._entries.values()
    assert entry.replay.compiled_after == compiled_after and entry.replay.native is not None


@mf.operation(results="new")
def waiting_double(x):
    """Twice ``x``, after 5 ms asleep: a replay that waits as one does for a core on a busy machine."""
    time.sleep(0.005)
    return x * 2.0


def test_a_replay_that_waits_without_using_the_cpu_is_not_compiled_sooner(monkeypatch):
    """Its three operations may run 15 ms as a program before compiling (5 ms each here): asleep 5 ms
    in each replay, as a replay waits for a core on a busy machine, it would have compiled after its
    third on wall time, but its CPU time is a fraction of a millisecond, so it compiles at
    `COMPILE_AFTER` (12 here), as an idle machine would (wall time had a loaded machine compile the
    default experiment's step after 11 replays rather than 28). Every call gives the eager bits."""
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", 12)
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_SECONDS_PER_OPERATION", 0.005)
    f = lambda x: np.multiply(waiting_double(np.add(x, 1.0)), 3.0)   # noqa: E731
    step, rng = mf.compile(f), np.random.default_rng(0)
    for k in range(72):
        x = rng.normal(size=4)
        assert step(x).tobytes() == f(x).tobytes(), f"call {k}"
    (entry,) = step._entries.values()
    assert entry.replay.compiled_after == 12
