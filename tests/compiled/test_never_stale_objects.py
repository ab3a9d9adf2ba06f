"""Objects a compiled function reads, changes or returns: free variables it writes, dict keys, generators,
bound methods, 0-d arrays, library objects, results whose dtype the data choose, class attributes, a
user module's attributes, the standard library's containers, subclasses of ndarray and files. Each is
keyed, refused with a message naming it, or handed back as the eager function hands it back, bit for bit.
"""
from __future__ import annotations

import array
import collections
import io
import logging
import queue
import types

import numpy as np
import pytest

import minflux as mf
from tests.compiled.step_programs import same


def test_a_side_effect_on_a_free_variable_is_refused():
    log = []

    def logged(x):
        log.append(1)
        return x * 2.0

    with pytest.raises(mf.NotReplayable, match="changes the structure"):
        mf.compile(logged)(np.ones(2))


@pytest.mark.parametrize("key", [np.int64(3), float("nan"), "w@1", ("a", 2), 2.5])
def test_dict_keys_of_every_kind_reach_the_replay_as_themselves(key):
    @mf.operation
    def pick(tree):
        return tree[key] * 2.0

    f = mf.compile(lambda x: pick({key: x, "other": x + 1.0}))
    for k in range(70):       # the 65th replay runs the straight-line form
        x = np.full(2, float(k))
        assert same(f(x), x * 2.0)
    assert f.recordings == 1


def test_a_returned_generator_is_the_callers_and_check_mode_shares_what_cannot_be_copied():
    import threading

    f = mf.compile(lambda rng, x: (x + rng.normal(size=2), rng))
    rng, twin = np.random.default_rng(0), np.random.default_rng(0)
    for _ in range(3):
        y, back = f(rng, np.zeros(2))
        assert back is rng and same(y, twin.normal(size=2))

    class Holder:
        def __init__(self):
            self.lock, self.w = threading.Lock(), np.ones(2)

    holder = Holder()
    g = mf.compile(lambda h, x: x * h.w, check=True)
    for k in range(3):
        assert same(g(holder, np.full(2, float(k))), np.full(2, float(k)))


def test_a_compiled_bound_method_reads_and_updates_its_objects_arrays():
    class Trainer:
        def __init__(self):
            self.model = {"w": np.array([0.5, -1.0])}
            self.opt_state = mf.optim.setup(mf.optim.Descent(0.1), self.model)
            self.step = mf.compile(self._step)

        def _step(self, x):
            loss, (grads,) = mf.withgradient(lambda m: mf.sum(mf.tanh(m["w"] * x)), self.model)
            mf.optim.update(self.opt_state, self.model, grads)
            return loss

    trainer, twin = Trainer(), Trainer()
    for k in range(5):
        x = np.full(2, 1.0 + k)
        assert same(trainer.step(x), twin._step(x))
    assert same(trainer.model["w"], twin.model["w"]) and trainer.step.replays == 4


def test_a_0d_array_rebound_to_a_numpy_scalar_is_refused_naming_the_in_place_form():
    def accumulate(state, x):
        state["total"] = state["total"] + mf.sum(x)     # numpy makes this a scalar, eagerly too
        return x * 2.0

    with pytest.raises(mf.NotReplayable, match=r"rebinds argument 0's total from an array to a numpy "
                                               r"scalar .* in place instead"):
        mf.compile(accumulate)({"total": np.zeros(())}, np.ones(3))

    def in_place(state, x):
        state["total"] += mf.sum(x)
        return x * 2.0

    f, state, twin = mf.compile(in_place), {"total": np.zeros(())}, {"total": np.zeros(())}
    for k in range(4):
        assert same(f(state, np.full(3, k)), in_place(twin, np.full(3, k)))
    assert same(state["total"], twin["total"]) and f.replays == 3


experiment_log = logging.getLogger("minflux.tests.experiment")
experiment_log.addHandler(logging.StreamHandler(io.StringIO()))   # a stream: an iterator, if walked


def logs_and_doubles(x, namespace):
    experiment_log.debug("a step")
    return x * namespace.scale


def test_library_objects_are_keyed_by_identity_and_namespaces_are_walked():
    import types as pytypes

    f = mf.compile(logs_and_doubles)
    settings = pytypes.SimpleNamespace(scale=2.0)
    for scale in (2.0, 2.0, 3.0, 2.0):
        settings.scale = scale
        assert same(f(np.ones(2), settings), np.full(2, scale))
    assert f.recordings == 2 and f.replays == 2


@mf.operation(results="new")
def mean_in_a_dtype_the_data_choose(x):
    """float64 where the mean is positive, else float32: a result type chosen by the values."""
    return x.astype(np.float64 if x.mean() > 0 else np.float32)


def tripled_mean_in_either_dtype(x):
    y = np.multiply(x, 1.0)   # a native command, where a native form is built
    return np.multiply(np.multiply(mean_in_a_dtype_the_data_choose(y), 3.0), 1.0)


@pytest.mark.parametrize("native", [False, True])
def test_an_operation_whose_result_dtype_the_data_choose_is_refused_not_replayed_wrong(native, monkeypatch):
    """What follows it was planned on the recorded dtype (a float32 buffer would take float64 values
    silently): the replay refuses, naming the operation."""
    from minflux.runtime import native_runner, settings

    monkeypatch.setattr("minflux.schedule.replay.COMPILE_AFTER", 5)
    native_runner.load_runner()
    settings.set("native_replay", native)
    try:
        step = mf.compile(tripled_mean_in_either_dtype)
        rng = np.random.default_rng(0)
        for k in range(20):
            x = (rng.normal(size=5) - 3).astype(np.float32)
            assert step(x).tobytes() == tripled_mean_in_either_dtype(x).tobytes()
        (entry,) = step._entries.values()
        assert (entry.replay.native is not None) == native
        x = (rng.normal(size=5) + 3).astype(np.float32)
        assert tripled_mean_in_either_dtype(x).dtype == np.float64
        with pytest.raises(mf.NotReplayable, match="operation mean_in_a_dtype_the_data_choose gave a float64 "
                                                   "array of shape .5,. where its recording gave a float32 array"):
            step(x)
    finally:
        settings.unset("native_replay")


class Scale:
    def __init__(self, factor):
        self.factor = factor


class SlottedScale:
    __slots__ = ("factor",)

    def __init__(self, factor):
        self.factor = factor


def test_objects_of_one_class_are_each_walked_for_what_they_hold():
    """The walk decides once per class how to walk its objects; each object's own attributes are
    still read on every call: objects of one class holding other values, a slotted class, a
    namespace and a Tensor, 72 calls against the eager function, bit for bit."""
    import types as pytypes

    def scaled(x, scale, shift):
        return x * scale.factor + shift

    f = mf.compile(scaled)
    rng = np.random.default_rng(5)
    kinds = [Scale(2.0), Scale(3.0), SlottedScale(2.0), pytypes.SimpleNamespace(factor=0.5)]
    with pytest.warns(RuntimeWarning, match=r"has recorded [56] times"):   # and says what changed
        for k in range(72):
            scale, x = kinds[k % len(kinds)], rng.normal(size=3)
            shift = mf.Tensor(np.full(3, float(k % 3))) if k % 2 else np.full(3, 1.0)
            assert same(f(x, scale, shift), scaled(x, scale, np.asarray(getattr(shift, "value", shift))))
            kinds[1].factor = 3.0 + k % 3     # changed in place between calls: three values
    assert f.recordings == 6 and f.replays == 66   # one per object and factor (a Tensor is its value)


class Holder:
    """An object whose attributes hold a tuple of arrays and a list of tuples."""

    def __init__(self, rng):
        self.pair = (rng.normal(size=3), rng.normal(size=3), 0.5)
        self.rows = [(rng.normal(size=2), rng.normal(size=2))]


def rewrite_tuples(holder, x):
    a, b, scale = holder.pair
    holder.pair = (a + x, b, scale)            # one item of a tuple written back
    first, second = holder.rows[0]
    holder.rows[0] = (first * 2.0, second - x[:2])   # two items of a tuple in a list: rebuilt once
    return a.sum() + first.sum()


def test_values_written_back_into_tuples_reach_their_places_as_the_eager_calls_put_them():
    """Written-back values are put into each tuple at once (it is rebuilt once); 72 calls against an
    eager twin, bit for bit."""
    fn = rewrite_tuples
    rng = np.random.default_rng(51)
    holder, twin = Holder(np.random.default_rng(52)), Holder(np.random.default_rng(52))
    step = mf.compile(fn)
    for k in range(72):
        x = rng.normal(size=3)
        assert same(step(holder, x), fn(twin, x)), f"call {k}"
        for got, want in ((holder.pair[:2], twin.pair[:2]), (holder.rows[0], twin.rows[0])):
            assert all(same(g, w) for g, w in zip(got, want)), f"call {k}"
        assert holder.pair[2] == twin.pair[2] and len(holder.rows) == len(twin.rows)
    assert step.replays >= 60


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
@pytest.mark.parametrize("make", [lambda: np.matrix([[1.0, 2.0], [3.0, 4.0]]),
                                  lambda: np.ma.masked_array([[1.0, 2.0], [3.0, 4.0]], mask=[[0, 1], [0, 0]])])
def test_an_ndarray_subclass_is_refused_naming_it_not_replayed_as_a_plain_array(make):
    """A matrix's ``*`` multiplies matrices and a masked array's operations keep its mask, neither of
    which a recording of numpy's calls on plain arrays repeats; a plain array before it does not make
    a recording it would replay."""
    def squared(x):
        return x * x

    step = mf.compile(squared)
    step(np.ones((2, 2)))
    with pytest.raises(mf.NotReplayable, match="subclass of numpy.ndarray.*np.asarray"):
        step(make())
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        assert type(mf.compile(squared, fallback="eager")(make())) is type(make())


class Scaled:
    scale = 2.0                        # a class attribute, read through the instance

    def __call__(self, x):
        return x * self.scale + Settings.shift


class Settings:
    shift = 0.5                        # a class attribute, read through the class


def test_class_attributes_read_through_an_instance_or_the_class_are_keyed_for_72_calls():
    def step(layer, x):
        return layer(x)

    compiled, layer, x = mf.compile(step), Scaled(), np.linspace(-1.0, 1.0, 5)
    try:
        for k in range(72):
            Scaled.scale, Settings.shift = (2.0, -0.0)[k % 2], (0.5, 0.25)[k // 2 % 2]
            assert compiled(layer, x).tobytes() == step(layer, x).tobytes(), f"call {k}"
    finally:
        Scaled.scale, Settings.shift = 2.0, 0.5
    assert compiled.recordings == 4


config = types.ModuleType("experiment_config")   # a user's configuration module, imported as a global
config.lr, config.offset = 0.5, np.zeros(5)


def in_a_closure(settings):
    return lambda x, _: x * settings.lr + settings.offset


@pytest.mark.parametrize("step, given", [(lambda x, _: x * config.lr + config.offset, None),   # a global
                                         (lambda x, _: x * getattr(config, "lr") + config.offset, None),
                                         (in_a_closure(config), None),
                                         (lambda x, settings: x * settings.lr + settings.offset, config)])
def test_attributes_of_a_user_module_are_keyed_for_72_calls(step, given):
    compiled, x = mf.compile(step), np.linspace(-1.0, 1.0, 5)
    try:
        for k in range(72):
            config.lr, config.offset = (0.5, 0.25)[k % 2], np.full(5, float(k))   # rebound, of one layout
            assert compiled(x, given).tobytes() == step(x, given).tobytes(), f"call {k}"
    finally:
        config.lr, config.offset = 0.5, np.zeros(5)
    assert compiled.recordings == 2


history = collections.deque([np.full(3, k) for k in (1.0, 2.0, 3.0, 4.0)], maxlen=4)   # read, and appended to


def test_a_deque_is_walked_as_a_sequence_for_72_calls():
    def step(x):
        return x * history[-1] + history[0]

    compiled, x = mf.compile(step), np.linspace(-1.0, 1.0, 3)
    for k in range(72):
        if k % 3 == 2:
            history.append(np.full(3, float(k)))   # its oldest array leaves it
        assert compiled(x).tobytes() == step(x).tobytes(), f"call {k}"
    assert compiled.recordings == 1


@pytest.mark.parametrize("held, named", [(array.array("d", [0.5]), "an array.array"),
                                         (bytearray(b"ab"), "a bytearray"), (queue.Queue(), "a queue.Queue")])
def test_a_container_whose_contents_no_key_holds_is_refused_naming_it(held, named):
    with pytest.raises(mf.NotReplayable, match=named):
        mf.compile(lambda x: x * len(held))(np.ones(2))


settings_chain = collections.ChainMap({"lr": 0.5}, {"shift": 1.0})
settings_user = collections.UserDict(lr=0.5)
scales = collections.UserList([2.0, np.ones(3)])


def test_the_standard_librarys_other_containers_are_walked_by_their_items_for_72_calls():
    def step(x):
        return x * settings_chain["lr"] * settings_user["lr"] * scales[0] + scales[1] + settings_chain["shift"]

    compiled, x = mf.compile(step), np.linspace(-1.0, 1.0, 3)
    for k in range(72):
        settings_chain["lr"], settings_user["lr"] = (0.5, 0.25)[k % 2], (0.5, -0.0)[k // 2 % 2]
        scales[1] = np.full(3, float(k))   # an array of one layout: an input, read on every call
        assert compiled(x).tobytes() == step(x).tobytes(), f"call {k}"
    assert compiled.recordings == 4


def test_reading_a_file_is_refused_naming_how(tmp_path):
    path = tmp_path / "lr.txt"
    path.write_text("0.5")
    np.save(tmp_path / "w.npy", np.ones(2))

    def builtin_open(x):
        with open(path) as f:
            return x * float(f.read())

    for fn, named in [(builtin_open, "`open`"), (lambda x: x * float(path.read_text()), "`read_text`"),
                      (lambda x: x * np.load(tmp_path / "w.npy"), "`np`")]:
        with pytest.raises(mf.NotReplayable, match=f"reads a file.*{named}"):
            mf.compile(fn)(np.ones(2))
