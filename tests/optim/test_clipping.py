"""Clipping by value and by the global norm of the whole gradient tree."""
import math

import numpy as np
import pytest

import minflux as mf
from minflux import optim

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


def test_global_norm_counts_tied_arrays_once_and_skips_none():
    g = np.array([3.0, 4.0])
    assert optim.global_norm({"a": g, "b": g, "c": None, "d": [np.array([12.0])]}) == 13.0


def test_clip_by_global_norm_scales_every_array():
    grads = {"a": np.array([3.0, 0.0]), "b": [np.array([[4.0]])]}
    clipped, norm = optim.clip_by_global_norm(grads, 2.5)
    assert norm == 5.0
    np.testing.assert_allclose(clipped["a"], [1.5, 0.0])
    np.testing.assert_allclose(clipped["b"][0], [[2.0]])
    same, norm = optim.clip_by_global_norm(grads, 10.0)
    assert same is grads and norm == 5.0


def test_clip_norm_is_global_across_the_model():
    model = {"a": np.zeros(2), "b": np.zeros(1)}
    state = optim.setup(optim.chain(optim.ClipNorm(1.0), optim.Descent(1.0)), model)
    optim.update(state, model, {"a": np.array([3.0, 0.0]), "b": np.array([4.0])})
    np.testing.assert_allclose(model["a"], [-0.6, 0.0])   # each array by 1/5, not to norm 1 apiece
    np.testing.assert_allclose(model["b"], [-0.8])
    optim.update(state, model, {"a": np.array([0.3, 0.0]), "b": np.array([0.4])})
    np.testing.assert_allclose(model["a"], [-0.9, 0.0])   # norm 0.5 < 1: unchanged


def test_clip_norm_sees_the_gradient_after_earlier_rules_and_skips_frozen():
    model = {"a": np.array([2.0]), "b": np.array([0.0]), "c": np.array([5.0])}
    rule = optim.chain(optim.WeightDecay(1.0), optim.ClipNorm(1.0), optim.Descent(1.0))
    state = optim.setup(rule, model)
    optim.freeze(state["c"])
    # after decay: a -> 1 + 2 = 3, b -> 4 + 0 = 4; norm 5 (c is frozen and not counted)
    optim.update(state, model, {"a": np.array([1.0]), "b": np.array([4.0]), "c": np.array([100.0])})
    np.testing.assert_allclose(model["a"], [2.0 - 0.6])
    np.testing.assert_allclose(model["b"], [-0.8])
    np.testing.assert_array_equal(model["c"], [5.0])


def test_clip_norm_with_a_real_model_gradient():
    r = np.random.default_rng(0)
    m = mf.nn.Chain(mf.nn.Dense(3, 4, mf.tanh, rng=r, dtype=np.float64), mf.nn.Dense(4, 1, rng=r, dtype=np.float64))
    x = r.standard_normal((8, 3))
    (g,) = mf.gradient(lambda m: mf.sum(m(x) ** 2) * 100, m)
    norm = math.sqrt(sum(float((a ** 2).sum()) for _, a in mf.nn.named_parameters(g)))
    assert norm > 1
    before = [a.copy() for a in m.parameters()]
    state = optim.setup(optim.chain(optim.ClipNorm(1.0), optim.Descent(1.0)), m)
    optim.update(state, m, g)
    step = np.sqrt(sum(((b - a) ** 2).sum() for a, b in zip(m.parameters(), before)))
    assert abs(step - 1.0) < 1e-12


def test_a_non_finite_norm_is_refused_by_default_naming_the_arrays_and_passes_only_on_request():
    model = {"layers": [{"W": np.zeros(2)}, {"W": np.zeros(2)}], "b": np.zeros(1)}
    state = optim.setup(optim.chain(optim.ClipNorm(1.0), optim.Descent(1.0)), model)
    grads = {"layers": [{"W": np.ones(2)}, {"W": np.array([np.nan, 1.0])}], "b": np.array([np.inf])}
    with pytest.raises(FloatingPointError) as caught:
        optim.update(state, model, grads)
    assert str(caught.value) == ("ClipNorm: the global gradient norm is nan: the gradients of 2 arrays hold a "
                                 "NaN or an infinity: layers.1.W, b; nothing was updated (ClipNorm(..., "
                                 "throw=False) lets a non-finite norm through)")
    assert not any(a.any() for a in mf.tree.leaves(model))  # nothing changed
    relaxed = optim.setup(optim.chain(optim.ClipNorm(1.0, throw=False), optim.Descent(1.0)), model)
    optim.update(relaxed, model, {"layers": [{"W": np.ones(2)}, {"W": np.ones(2)}], "b": np.array([np.inf])})
    assert model["layers"][0]["W"].tolist() == [0.0, 0.0] and np.isnan(model["b"][0])  # factor 1 / inf = 0


def test_an_overflowing_norm_of_finite_gradients_is_named_as_such():
    model = {"a": np.zeros(2, np.float32)}
    state = optim.setup(optim.chain(optim.ClipNorm(1.0), optim.Descent(1.0)), model)
    with pytest.raises(FloatingPointError, match="every gradient element is finite, but their squares overflow"):
        optim.update(state, model, {"a": np.array([3e38, 3e38], np.float32)})


def test_a_clip_norm_called_outside_update_names_the_arrays_by_position():
    with pytest.raises(FloatingPointError, match="the gradient of array 1 holds a NaN"):
        optim.ClipNorm(1.0).apply_all([(), ()], [None, None], [np.ones(2), np.array([np.nan])])


@pytest.mark.parametrize("max_norm", [2.5, 10.0, 0.0])
def test_clip_norm_device_path_matches_the_host_path(monkeypatch, max_norm):
    """The path taken for CuPy arrays (no host read), run here with numpy functions as the module."""
    import types

    import minflux.optim.clipping as clipping

    grads = [np.array([3.0, 0.0]), np.array([[4.0]])]
    rule = optim.ClipNorm(max_norm)
    _, host = rule.apply_all([(), ()], [None, None], grads)
    device_like = types.SimpleNamespace(sqrt=np.sqrt, minimum=np.minimum, maximum=np.maximum, vdot=np.vdot,
                                        stack=np.stack, float64=np.float64)
    monkeypatch.setattr(clipping, "xp_of", lambda *arrays: device_like)
    _, device = rule.apply_all([(), ()], [None, None], grads)
    for a, b in zip(host, device):
        np.testing.assert_array_equal(a, b)
    if max_norm == 2.5:
        np.testing.assert_array_equal(device[0], [1.5, 0.0])


class _Counted(np.ndarray):
    """A numpy array standing in for a device array: converting it to a Python number is a host read."""

    def __float__(self):
        mf.transfer_guard.note_transfer("float() of a device array")
        return float(self.view(np.ndarray))


def _device_module():
    """numpy functions whose results stand in for device arrays (reading one counts as a transfer)."""
    import types

    def counted(fn):
        return lambda *args, **kwargs: np.asarray(fn(*args, **kwargs)).view(_Counted)

    return types.SimpleNamespace(sqrt=counted(np.sqrt), minimum=counted(np.minimum),
                                 maximum=counted(np.maximum), vdot=counted(np.vdot),
                                 stack=counted(np.stack), float64=np.float64)


@pytest.mark.parametrize("throw", [True, False])
def test_clip_norm_reads_the_device_once_per_update_whatever_the_number_of_arrays(monkeypatch, throw):
    import minflux.optim.clipping as clipping

    grads = [np.full(3, 2.0), np.full((2, 2), 1.0), np.array([4.0]), np.zeros(5)]
    expected = clipping.ClipNorm(1.0).apply_all([()] * 4, [None] * 4, grads)[1]
    monkeypatch.setattr(clipping, "xp_of", lambda *arrays: _device_module())
    with mf.no_host_transfers(strict=False) as transfers:
        _, clipped = clipping.ClipNorm(1.0, throw=throw).apply_all([()] * 4, [None] * 4, grads)
    assert transfers.count == (1 if throw else 0)
    for a, b in zip(clipped, expected):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-15)
    with mf.no_host_transfers(strict=False) as transfers:
        assert optim.global_norm(grads) == math.sqrt(12 + 4 + 16)
    assert transfers.count == 1


def test_a_finite_norm_means_every_element_is_finite_and_an_overflow_still_raises():
    model = {"a": np.zeros(2, np.float32), "b": np.zeros(1, np.float32)}
    state = optim.setup(optim.chain(optim.ClipNorm(1.0, throw=True), optim.Descent(1.0)), model)
    for bad in ([np.nan, 0.0], [np.inf, 0.0], [-np.inf, 1.0], [3e38, 3e38]):   # the last overflows
        with pytest.raises(FloatingPointError):
            optim.update(state, model, {"a": np.array(bad, np.float32), "b": np.ones(1, np.float32)})
        assert not model["a"].any() and not model["b"].any()   # nothing changed
