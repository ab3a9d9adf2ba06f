"""The tape and the gradient API: trees, aux outputs, errors, no hidden state, no_grad and
stop_gradient, the tape's lifetime, and in-place accumulation of gradients."""
from __future__ import annotations

import warnings
import weakref
from collections import namedtuple

import numpy as np
import pytest

import minflux as mf
from minflux.autograd import IndexedGrad, Tape, _Gradients, active_tape, record
from minflux.testing import check_grad


class Layer:
    def __init__(self, W, b, activation=mf.tanh):
        self.W, self.b, self.activation, self.size = W, b, activation, W.shape[0]

    def __call__(self, x):
        return self.activation(x @ self.W + self.b)


def test_gradient_of_the_readme_example():
    g, = mf.gradient(lambda x: mf.sum(mf.tanh(x) * x), np.ones(3))
    t = np.tanh(1.0)
    np.testing.assert_allclose(g, np.full(3, t + (1 - t * t)))


def test_one_gradient_per_argument(rng):
    a, b = rng.standard_normal(3), rng.standard_normal(3)
    ga, gb = mf.gradient(lambda a, b: mf.sum(a * b * b), a, b)
    np.testing.assert_allclose(ga, b * b)
    np.testing.assert_allclose(gb, 2 * a * b)


def test_gradient_of_an_object_tree_has_the_same_structure(rng):
    layer = Layer(rng.standard_normal((3, 2)), rng.standard_normal(2))
    x = rng.standard_normal((4, 3))
    g, gx = mf.gradient(lambda m, x: mf.sum(m(x) ** 2), layer, x)
    assert isinstance(g, Layer) and g is not layer
    assert g.W.shape == (3, 2) and g.b.shape == (2,)
    assert g.activation is None and g.size is None  # configuration gets no gradient
    assert layer.W.shape == (3, 2) and layer.activation is mf.tanh  # the model is untouched
    h = np.tanh(x @ layer.W + layer.b)
    d = 2 * h * (1 - h * h)
    np.testing.assert_allclose(g.W, x.T @ d)
    np.testing.assert_allclose(g.b, d.sum(0))
    np.testing.assert_allclose(gx, d @ layer.W.T)
    check_grad(lambda m, x: mf.sum(m(x) ** 2), layer, x)


def test_lists_tuples_dicts_and_namedtuples(rng):
    Pair = namedtuple("Pair", "u v")
    params = {"layers": [rng.standard_normal(2), (rng.standard_normal(2), 3)], "pair": Pair(np.ones(2), "x")}

    def f(p):
        first, (second, k) = p["layers"]
        return mf.sum(first * second * k + p["pair"].u)

    g, = mf.gradient(f, params)
    assert isinstance(g["layers"], list) and isinstance(g["layers"][1], tuple) and isinstance(g["pair"], Pair)
    np.testing.assert_allclose(g["layers"][0], params["layers"][1][0] * 3)
    np.testing.assert_allclose(g["layers"][1][0], params["layers"][0] * 3)
    assert g["layers"][1][1] is None and g["pair"].v is None
    np.testing.assert_allclose(g["pair"].u, np.ones(2))


def test_unused_and_integer_arrays_get_none():
    params = {"used": np.ones(2), "unused": np.ones(2), "ids": np.array([1, 0]), "mask": np.array([True, False])}

    def f(p):
        assert not isinstance(p["ids"], mf.Tensor) and not isinstance(p["mask"], mf.Tensor)
        return mf.sum(mf.take(p["used"], p["ids"]) * p["mask"])

    g, = mf.gradient(f, params)
    np.testing.assert_array_equal(g["used"], [0.0, 1.0])
    assert g["unused"] is None and g["ids"] is None and g["mask"] is None


def test_tied_arrays_are_one_leaf_whose_gradient_accumulates():
    w = np.array([1.0, 2.0])
    model = {"encoder": w, "decoder": w}
    g, = mf.gradient(lambda m: mf.sum(m["encoder"] * 3.0) + mf.sum(m["decoder"] * m["decoder"]), model)
    np.testing.assert_allclose(g["encoder"], 3.0 + 2 * w)
    assert g["decoder"] is g["encoder"]


def test_trainable_restricts_the_parameters():
    class Norm:
        trainable = ("scale",)

        def __init__(self):
            self.scale, self.running = np.ones(2), np.ones(2)

    g, = mf.gradient(lambda m: mf.sum(m.scale * m.running * 2.0), Norm())
    np.testing.assert_array_equal(g.scale, [2.0, 2.0])
    assert g.running is None


def test_loss_with_aux_returns_plain_arrays():
    def f(x):
        y = x * 2
        return mf.sum(y), {"y": y, "n": 3}

    (loss, aux), (g,) = mf.withgradient(f, np.ones(2))
    assert float(loss) == 4.0 and not isinstance(loss, mf.Tensor)
    assert type(aux["y"]) is np.ndarray and aux["n"] == 3
    np.testing.assert_array_equal(g, [2.0, 2.0])
    g2, = mf.gradient(f, np.ones(2))
    np.testing.assert_array_equal(g2, [2.0, 2.0])


def test_withgradient_value():
    value, (g,) = mf.withgradient(lambda x: mf.mean(x ** 2), np.array([1.0, 3.0]))
    assert float(value) == 5.0
    np.testing.assert_array_equal(g, [1.0, 3.0])


def test_non_scalar_loss_is_an_error():
    with pytest.raises(ValueError, match=r"gradient needs f to return a scalar loss; f returned an array "
                                         r"of shape \(3,\)"):
        mf.gradient(lambda x: x * 2, np.ones(3))
    with pytest.raises(TypeError, match="gradient needs f to return a scalar loss.*returned str"):
        mf.gradient(lambda x: "loss", np.ones(3))
    with pytest.raises(ValueError, match=r"returned \(\)"):
        mf.gradient(lambda x: (), np.ones(3))


def test_loss_independent_of_the_arguments_is_an_error():
    with pytest.raises(ValueError, match="does not depend on the arguments"):
        mf.gradient(lambda x: 1.0, np.ones(2))
    with pytest.raises(ValueError, match="does not depend on the arguments"):
        mf.gradient(lambda x: mf.sum(mf.stop_gradient(x)), np.ones(2))
    assert mf.gradient(lambda x, y: mf.sum(y), np.ones(2), np.ones(1))[0] is None  # one unused argument


def test_calling_gradient_twice_gives_the_same_result(rng):
    layer = Layer(rng.standard_normal((3, 2)), rng.standard_normal(2))
    x = rng.standard_normal((4, 3))
    mf.gradient(lambda m: mf.sum(m(x)), layer)  # the first call runs op by op; later ones are fused
    first = mf.gradient(lambda m: mf.sum(m(x)), layer)[0]
    second = mf.gradient(lambda m: mf.sum(m(x)), layer)[0]
    np.testing.assert_array_equal(first.W, second.W)
    np.testing.assert_array_equal(first.b, second.b)
    assert active_tape() is None


def test_the_tape_does_not_survive_gradient():
    tapes = []

    def f(x):
        y = mf.tanh(x) * x
        tapes.append(weakref.ref(y._tape))
        return mf.sum(y), y  # aux holding a tracked Tensor must not keep the tape alive

    value = mf.withgradient(f, np.ones(3))
    assert isinstance(tapes[0](), type(None)), "the tape outlived gradient"
    assert type(value[0][1]) is np.ndarray


def test_the_tape_is_released_when_f_raises():
    tapes = []

    def f(x):
        tapes.append(weakref.ref((x * 2)._tape))
        raise KeyError("boom")

    with pytest.raises(KeyError):
        mf.gradient(f, np.ones(1))
    assert tapes[0]() is None
    assert active_tape() is None


def test_no_grad_treats_results_as_constants():
    def f(x):
        with mf.no_grad():
            c = x * x
            assert active_tape() is None
        assert isinstance(c, mf.Tensor) and c._tape is None
        return mf.sum(c * x)

    g, = mf.gradient(f, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(g, [1.0, 4.0])


def test_stop_gradient():
    g, = mf.gradient(lambda x: mf.sum(mf.stop_gradient(x * x) * x), np.array([3.0]))
    np.testing.assert_array_equal(g, [9.0])
    assert mf.stop_gradient(2.0) == 2.0


def test_ops_outside_gradient_return_arrays():
    assert type(mf.sum(np.ones(2) * 2)) in (np.float64, np.ndarray)
    assert type(mf.tanh(np.ones(2)) @ np.ones(2)) in (np.float64, np.ndarray)


def test_tensor_arguments_are_accepted():
    g, = mf.gradient(lambda x: mf.sum(x * x), mf.Tensor(np.array([2.0])))
    np.testing.assert_array_equal(g, [4.0])


def test_returned_gradients_are_fresh_writable_arrays():
    def f(a, b):
        return mf.sum(a + b) + mf.sum(mf.reshape(a, (2, 2)))

    ga, gb = mf.gradient(f, np.ones(4), np.ones(4))
    assert ga is not gb and not np.shares_memory(ga, gb)
    ga += 1.0  # must not raise (broadcast views are read-only) nor change gb
    np.testing.assert_array_equal(gb, np.ones(4))
    gs, = mf.gradient(lambda x: mf.sum(x), np.ones(3))  # the VJP of sum is a broadcast view
    gs *= 2.0
    np.testing.assert_array_equal(gs, [2.0, 2.0, 2.0])


def test_float32_gradients_stay_float32(rng):
    layer = Layer(rng.standard_normal((3, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32))
    x = rng.standard_normal((4, 3)).astype(np.float32)
    g, = mf.gradient(lambda m: mf.cross_entropy(m(x), np.array([0, 1, 1, 0])), layer)
    assert g.W.dtype == np.float32 and g.b.dtype == np.float32


def test_floating_point_warnings_are_off_inside_gradient():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        value, (g,) = mf.withgradient(lambda x: mf.sum(mf.log(x)) + mf.sum(mf.sqrt(x)), np.array([0.0, 1.0]))
    assert np.isneginf(value)
    np.testing.assert_array_equal(g, [np.inf, 1.5])


def test_custom_node_with_record(rng):
    def cube(x):
        v = x.value if isinstance(x, mf.Tensor) else x
        return record("cube", v ** 3, [x], lambda g, needs: [g * 3 * v ** 2])

    x = rng.standard_normal(4)
    check_grad(lambda x: mf.sum(cube(mf.sin(x))), x)


def test_multi_output_record_with_unused_outputs():
    def two(x):
        v = x.value
        return record("two", [v * 2, v * 3], [x], lambda gs, needs: [sum(g * k for g, k in zip(gs, (2, 3))
                                                                        if g is not None)], multi=True)

    g, = mf.gradient(lambda x: mf.sum(two(x)[1]), np.ones(2))
    np.testing.assert_array_equal(g, [3.0, 3.0])


def test_gradients_accumulate_in_place_once_owned():
    grads = _Gradients()
    first, second = np.ones(3), np.full(3, 2.0)
    grads.add(1, first)
    assert grads.by_slot[1] is first  # handed-over arrays are not copied...
    grads.add(1, second)
    owned = grads.by_slot[1]
    assert owned is not first and first.tolist() == [1, 1, 1]  # ...and never written into
    grads.add(1, np.ones(3))
    assert grads.by_slot[1] is owned  # owned buffers are updated in place
    grads.add(1, IndexedGrad((3,), np.dtype(float), np.array([2, 2]), np.ones(2), unique=False))
    assert grads.by_slot[1] is owned
    np.testing.assert_array_equal(owned, [4, 4, 6])


def test_indexed_gradient_into_a_shared_array_copies_first():
    grads = _Gradients()
    shared = np.zeros(3)
    grads.add(5, shared)
    grads.add(5, IndexedGrad((3,), np.dtype(float), slice(0, 2), np.ones(2), unique=True))
    np.testing.assert_array_equal(shared, [0, 0, 0])
    np.testing.assert_array_equal(grads.by_slot[5], [1, 1, 0])


def test_tape_slots_are_distinct():
    tape = Tape()
    assert [tape.new_slot() for _ in range(3)] == [1, 2, 3]


def test_a_zero_dimensional_argument_keeps_every_contribution():
    s = np.array(2.0)
    (g,) = mf.gradient(lambda s: s * s * s, s)
    assert g.shape == () and float(g) == 12.0
    (g,) = mf.gradient(lambda s: mf.broadcast(lambda a, b, c: a * b * c, s, s, s, mode="reverse"), s)
    assert float(g) == 12.0
    (g,) = mf.gradient(lambda s: mf.sum(mf.tanh(s)) + mf.sum(mf.tanh(s)) + mf.sum(mf.tanh(s)), s)
    np.testing.assert_allclose(g, 3 * (1 - np.tanh(2.0) ** 2))


@pytest.mark.parametrize("op", ["split", "unstack", "layer_norm"])
def test_the_tape_does_not_keep_inputs_whose_values_the_backward_pass_never_reads(op, rng):
    """A VJP that needs only an input's shape and dtype must not keep the input alive: the tape of a
    long recurrent segment would otherwise hold every step's activations."""
    import gc

    from minflux.tensor import unwrap

    x = rng.standard_normal((4, 6))
    seen = {}

    def f(x):
        y = x * 2.0 + 1.0                        # its own node keeps only constant partials
        seen["y"] = weakref.ref(unwrap(y))
        parts = {"split": lambda: mf.split(y, 2, axis=-1), "unstack": lambda: mf.unstack(y, axis=0),
                 "layer_norm": lambda: [mf.layer_norm(y, np.ones(6), np.zeros(6))]}[op]()
        total = sum(mf.sum(mf.tanh(p)) for p in parts)
        del y, parts
        gc.collect()
        seen["alive"] = seen["y"]() is not None
        return total

    mf.gradient(f, x)
    assert not seen["alive"]


def test_bind_gives_a_deferred_tensor_the_node_recorded_for_it(rng):
    """A deferred Tensor read inside `gradient` takes the value and the output slot of the node its
    computation recorded (`autograd.bind`): ops that already hold the Tensor see the node's output,
    and the gradient flows through it (checked against float64 finite differences)."""
    from minflux.autograd import bind
    from minflux.tensor import Tensor

    w = rng.standard_normal(4096)             # large enough for elementwise ops to defer themselves

    class Cubed:   # a pending computation: its shape, dtype, and how to compute it
        def __init__(self, x):
            self.x, self.shape, self.dtype = x, x.shape, x.dtype

        def compute(self, tensor):
            x = self.x.value
            bind(tensor, record("cubed", x ** 3, [self.x], lambda g, needs: [3 * x * x * g]))

    def f(x):
        y = Tensor.deferred(Cubed(x), active_tape()) if isinstance(x, Tensor) else x ** 3
        held = [y, y]                          # two uses that hold the Tensor before it has a value
        assert not isinstance(x, Tensor) or y.is_deferred
        return mf.sum(held[0] * w) + mf.sum(held[1])

    x = rng.standard_normal(4096)
    np.testing.assert_allclose(mf.gradient(f, x)[0], 3 * x * x * (w + 1), rtol=1e-12)
    check_grad(f, x, max_elements=20)
    t = Tensor.deferred(Cubed(Tensor(x)), None)
    bind(t, np.ones(3))                        # an array hands over its value only
    assert not t.is_deferred and t._tape is None and np.all(t.value == 1)
