"""What `mf.compile` records that it used to refuse, replayed to the bit of the eager function over
several calls, and what it refuses at the recording (naming the line) because a replay could not
repeat it: text made from an array, round() of an array, memoryview, and results whose size
depends on the data."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import minflux as mf
from minflux.schedule import NotReplayable

CALLS = 4


def same_bits(got, expected, where="the result"):
    """``got`` is ``expected``: the same structure, types, dtypes, shapes and bytes."""
    assert type(got) is type(expected), f"{where}: {type(got).__name__} != {type(expected).__name__}"
    if isinstance(expected, dict):
        assert got.keys() == expected.keys(), where
        for key in expected:
            same_bits(got[key], expected[key], f"{where}[{key!r}]")
    elif isinstance(expected, (tuple, list)):
        assert len(got) == len(expected), where
        for k, (g, e) in enumerate(zip(got, expected)):
            same_bits(g, e, f"{where}[{k}]")
    elif isinstance(expected, np.random.Generator):
        assert got.bit_generator.state == expected.bit_generator.state, f"{where}: generator state"
    elif isinstance(expected, (np.ndarray, np.generic)):
        assert (got.dtype, np.shape(got)) == (expected.dtype, np.shape(expected)), where
        assert np.asarray(got).tobytes() == np.asarray(expected).tobytes(), f"{where}: {got} != {expected}"
    else:
        assert got == expected, f"{where}: {got!r} != {expected!r}"


def matches_eager(fn, make_args, calls: int = CALLS):
    """Compile ``fn`` and check every call against ``fn`` run eagerly on a twin of its arguments
    (``make_args(k)`` makes call ``k``'s); the recording must be replayed."""
    step = mf.compile(fn)
    for k in range(calls):
        args, twin = make_args(k), make_args(k)
        same_bits(step(*args), fn(*twin), f"call {k}")
        same_bits(list(args), list(twin), f"the arguments after call {k}")
    assert step.recordings == 1 and step.replays == calls - 1
    return step


def data(k: int, shape=(5,), dtype=np.float64):
    return np.random.default_rng(100 + k).normal(size=shape).astype(dtype)


# -- false refusals: recorded and replayed as eagerly -------------------------------------------

def test_a_scalar_rule_first_compiled_inside_a_recording_replays():
    """An elementwise function calling a `scalar_rule` made here, so that both are compiled while the
    recording runs (the compiled code they keep is a cache, not data the guard keys), over 72 calls."""
    @mf.scalar_rule(lambda m, x, a, y: m.where(abs(x) < 1 / a, a / 2, 0.0))
    def step(x, a):
        return 1.0 if x > 0 else 0.0

    @mf.elementwise
    def detect(x, a):
        return step(x, a)

    def loss(x):
        return mf.sum(mf.broadcast(detect, x, 2.0) * x)

    matches_eager(lambda x: mf.withgradient(loss, x), lambda k: (data(k, (40,)),), calls=72)


@pytest.mark.parametrize("n", [3, 5000])
def test_erf_of_an_array_replays(n):
    matches_eager(lambda x: mf.erf(x) * 2.0, lambda k: (data(k, (n,)),))


def test_erf_and_gelu_inside_a_gradient_replay_with_their_derivatives():
    def grads(x):
        return mf.gradient(lambda x: mf.sum(mf.erf(x)) + mf.sum(mf.gelu(x) * 3.0), x)

    step = matches_eager(grads, lambda k: (data(k),))
    x = data(7)
    (g,) = step(x)
    erf = np.vectorize(math.erf)
    d_erf = 2.0 / math.sqrt(math.pi) * np.exp(-x * x)
    d_gelu = 0.5 * (1.0 + erf(x / math.sqrt(2.0))) + x * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    np.testing.assert_allclose(g, d_erf + 3.0 * d_gelu, rtol=1e-13, atol=1e-15)


def test_gelu_gradient_of_the_documented_call():
    step = mf.compile(lambda x: mf.gradient(lambda x: mf.sum(mf.gelu(x)), x))
    for value in (1.0, -0.5, 2.0):
        x = np.full(3, value)
        (g,) = step(x)
        same_bits(g, mf.gradient(lambda x: mf.sum(mf.gelu(x)), x)[0])
        phi = 0.5 * (1.0 + math.erf(value / math.sqrt(2.0)))
        np.testing.assert_allclose(g, phi + value * math.exp(-0.5 * value * value) / math.sqrt(2 * math.pi),
                                   rtol=1e-13)


def test_a_structural_op_on_full_reductions_replays():
    matches_eager(lambda x: mf.stack([mf.sum(x), mf.mean(x), mf.max(x)]), lambda k: (data(k),))

    def grads(x, w):
        return mf.gradient(lambda x: mf.sum(mf.stack([mf.sum(x), mf.mean(x)]) * w), x)

    step = matches_eager(grads, lambda k: (data(k), data(k + 10, (2,))))
    x, w = data(1), data(2, (2,))
    np.testing.assert_allclose(step(x, w)[0], np.full(5, w[0] + w[1] / 5), rtol=1e-15)


def test_a_constant_boolean_mask_replays_values_and_gradients():
    def masked_mean(x):
        mask = np.arange(6) % 3 != 1            # made from constants: the same every call
        return mf.mean(x[mask]), (x[mask] * 2.0).sum()

    matches_eager(masked_mean, lambda k: (data(k, (6,)),))
    step = matches_eager(lambda x: mf.gradient(lambda x: masked_mean(x)[0], x), lambda k: (data(k, (6,)),))
    np.testing.assert_array_equal(step(data(9, (6,)))[0], [0.25, 0.0, 0.25, 0.25, 0.0, 0.25])


INDICES = [np.array([0, 2]), np.array([3, 1]), np.array([-1, 0]), np.array([2, -1])]


def test_index_set_with_an_index_argument_replays_every_index():
    matches_eager(lambda x, i, v: mf.index_set(x, i, v), lambda k: (data(k, (4,)), INDICES[k], data(k, (2,))))

    def grads(x, i, v, w):
        return mf.gradient(lambda x, v: mf.sum(mf.index_set(x, i, v) * w), x, v)

    step = matches_eager(grads, lambda k: (data(k, (4,)), INDICES[k], data(k, (2,)), data(k + 5, (4,))))
    w = data(3, (4,))
    for i in INDICES:
        gx, gv = step(data(0, (4,)), i, data(1, (2,)), w)
        expected_gx = w.copy()
        expected_gx[i] = 0.0
        np.testing.assert_array_equal(gx, expected_gx)
        np.testing.assert_array_equal(gv, w[i])


def test_index_set_checks_each_replays_index_for_repeated_positions():
    step = mf.compile(lambda x, i: mf.index_set(x, i, 5.0))
    step(np.zeros(3), np.array([0, 1]))
    step(np.zeros(3), np.array([2, 1]))
    for repeated in (np.array([1, 1]), np.array([-1, 2])):      # -1 and 2 are one position of 3
        with pytest.raises(ValueError, match="without repeated positions"):
            step(np.zeros(3), repeated)
    assert step.recordings == 1


def test_scalar_draws_of_a_generator_argument_replay_as_python_numbers():
    def noisy(x, rng):
        shift = rng.normal() * 2.0 + 1.0              # Python numbers, as eagerly: weak in promotion
        return x * rng.normal() + shift, rng.random(), abs(-rng.standard_normal()), x * rng.integers(5)

    matches_eager(noisy, lambda k: (data(k, dtype=np.float32), np.random.default_rng(k)))


def test_a_generator_arguments_random_method_beside_numpy_replays_for_72_calls():
    """``rng.random()`` of a Generator argument in a function that also reads numpy: no draw from
    numpy's global state, which ``np.random.random()`` would be."""
    def noisy(x, rng):
        return np.tanh(x) * rng.random() + rng.random(x.shape)

    matches_eager(noisy, lambda k: (data(k), np.random.default_rng(k)), calls=72)


def test_an_attribute_named_like_a_module_global_is_no_read_of_that_global_for_72_calls():
    """``rng.random()`` in a module that imports Python's ``random``: the attribute reads no global."""
    import random
    namespace = {"__name__": "experiment", "random": random, "np": np}
    exec("def noisy(x, rng):\n    return np.tanh(x) * rng.random()\n", namespace)   # noqa: S102 (the test's own text)
    matches_eager(namespace["noisy"], lambda k: (data(k), np.random.default_rng(k)), calls=72)


def test_a_dropout_layer_and_an_initialiser_made_inside_from_a_generator_argument_replay_for_72_calls():
    def noisy_step(x, rng):
        def loss(x):
            w = mf.nn.init.glorot_uniform(rng, 5, 3, dtype=x.dtype)
            return mf.sum(mf.nn.Dropout(0.5, rng=rng, active=True)(x) @ w)
        return mf.withgradient(loss, x)

    matches_eager(noisy_step, lambda k: (data(k, (4, 5)), np.random.default_rng(k)), calls=72)


def test_ascontiguousarray_of_a_traced_array_replays():
    def f(x, w):
        return np.ascontiguousarray(x.T) @ w, np.ascontiguousarray(x[:, ::2], dtype=np.float32) * 2.0

    matches_eager(f, lambda k: (data(k, (3, 4)), data(k + 1, (3, 2))))
    plain = np.ones((2, 3)).T
    out = np.ascontiguousarray(plain)
    assert type(out) is np.ndarray and out.flags.c_contiguous   # numpy's own function outside


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_compiled_gradient_step_with_a_0d_parameter(dtype):
    grads = lambda w: mf.gradient(lambda w: mf.sum(mf.tanh(w)), w)
    step = matches_eager(grads, lambda k: (np.array(0.5 + 0.25 * k, dtype),))
    (g,) = step(np.array(-1.5, dtype))
    assert g.shape == () and g.dtype == dtype
    np.testing.assert_allclose(g, 1.0 - np.tanh(np.float64(-1.5)) ** 2, rtol=1e-6 if dtype == np.float32 else 1e-15)


def test_round_of_a_recorded_number_replays():
    matches_eager(lambda x: (x * round(mf.sum(x)), x * round(mf.mean(x), 2)), lambda k: (data(k),))


# -- refusals at the recording, naming the line -------------------------------------------------

def refused(fn, *args, match: str) -> str:
    with pytest.raises(NotReplayable, match=match) as error:
        mf.compile(fn)(*args)
    message = str(error.value)
    assert "test_refusals_and_false_refusals.py" in message, message
    return message


def test_round_of_a_recorded_array_is_refused_with_the_fix():
    message = refused(lambda x: round(x), np.ones(3), match=r"calls round\(\) on an array")
    assert "np.round(x)" in message


@pytest.mark.skipif(sys.version_info < (3, 12), reason="a Python class takes part in the buffer protocol "
                                                       "from Python 3.12 (__buffer__)")
def test_memoryview_of_a_recorded_array_is_refused():
    refused(lambda x: memoryview(x), np.ones(3), match=r"reads an array's memory \(memoryview")


TEXT = {
    "str": lambda x: x * len(str(x)),
    "repr": lambda x: x * len(repr(x)),
    "format": lambda x: x * len(format(x, ".3f")),
    "f-string": lambda x: x * len(f"{x}"),
    "percent": lambda x: x * len("%s" % x),
    "print": lambda x: print(x) or x,
}


@pytest.mark.parametrize("name", sorted(TEXT))
def test_text_made_from_a_recorded_array_is_refused(name):
    refused(TEXT[name], np.ones(3), match="formats a recorded array as text")


DATA_SIZED = [
    ("np.where", lambda x, i: np.where(x > 0)),
    ("np.nonzero", lambda x, i: np.nonzero(x)),
    (r"\.nonzero\(\)", lambda x, i: x.nonzero()),
    ("np.flatnonzero", lambda x, i: np.flatnonzero(x)),
    ("np.argwhere", lambda x, i: np.argwhere(x)),
    ("np.bincount", lambda x, i: np.bincount(i)),
    ("np.repeat", lambda x, i: np.repeat(x, i)),
    (r"\.repeat\(\)", lambda x, i: x.repeat(i)),
    ("np.unique", lambda x, i: np.unique(x)),
    ("np.setdiff1d", lambda x, i: np.setdiff1d(x, np.array([1.0]))),
    ("np.intersect1d", lambda x, i: np.intersect1d(np.array([1.0]), x)),
    ("np.union1d", lambda x, i: np.union1d(x, x)),
    ("np.trim_zeros", lambda x, i: np.trim_zeros(x)),
    (r"\.compress\(\)", lambda x, i: x.compress(x > 0)),
    ("np.compress", lambda x, i: np.compress(x > 0, x)),
    ("np.extract", lambda x, i: np.extract(x > 0, x)),
    ("a recorded boolean mask", lambda x, i: x[x > 0]),
    ("a recorded boolean mask", lambda x, i: mf.sum(x[..., i > 0])),
]


@pytest.mark.parametrize("call, fn", DATA_SIZED, ids=[f"{k}-{pattern}" for k, (pattern, _) in enumerate(DATA_SIZED)])
def test_a_result_whose_size_depends_on_the_data_is_refused_naming_the_call(call, fn):
    x, i = np.array([0.0, 1.0, 0.0, 3.0, 3.0]), np.array([1, 0, 2, 1, 0])
    message = refused(fn, x, i, match=call)
    assert "depends on the data" in message


def test_the_fixed_size_forms_of_those_calls_replay():
    def fixed(x, i):
        constant = np.array([True, False, True, True, False])
        return (np.where(x > 0, x, 0.0), np.repeat(x, 2), x.repeat(np.array([1, 0, 2, 1, 1])),
                x.compress(constant), np.extract(constant, x), np.bincount(np.array([0, 2, 2, 1, 0]), weights=x),
                x[constant] * 2.0, mf.sum(x * (x > 0)))

    matches_eager(fixed, lambda k: (data(k), np.arange(5)))
