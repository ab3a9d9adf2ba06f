"""The host-transfer guard, exercised on the CPU with arrays that report their host conversions.

`DeviceLikeArray` is a numpy array standing in for a device array: converting it to a Python
number (``float``, ``int``, ``bool``, ``item``, ``tolist``) calls `note_transfer`, as a real device
array would copy to the host. numpy ops keep the subclass, so a model built from such arrays
reports every implicit host conversion its training step makes.
"""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.transfer_guard import HostTransferError, TransferLog, no_host_transfers, note_transfer


class DeviceLikeArray(np.ndarray):
    """A numpy array whose conversions to host values are reported to the transfer guard."""

    def _host(self, what):
        note_transfer(f"{what} of a DeviceLikeArray")
        return self.view(np.ndarray)

    def __float__(self):
        return float(self._host("float()"))

    def __int__(self):
        return int(self._host("int()"))

    def __index__(self):
        return self._host("operator.index()").__index__()

    def __bool__(self):
        return bool(self._host("bool()"))

    def item(self, *args):
        return self._host("item()").item(*args)

    def tolist(self):
        return self._host("tolist()").tolist()


def on_device(tree):
    return mf.tree.map_arrays(lambda a: a.view(DeviceLikeArray), tree, trainable_only=False)


def test_strict_guard_raises_and_names_the_conversion():
    x = np.ones(3, np.float32).view(DeviceLikeArray)
    with pytest.raises(HostTransferError, match=r"float\(\) of a DeviceLikeArray.*no_host_transfers"):
        with no_host_transfers():
            float(x.sum())


def test_every_host_conversion_is_seen():
    x = np.arange(4.0).view(DeviceLikeArray)
    with no_host_transfers(strict=False) as log:
        float(x[0, ...]), int(x[1, ...]), bool(x[2, ...]), x.item(3), x.tolist()
        if x[1, ...] > 0:   # 0-d slices stay arrays, as on a device
            pass
    assert log.count == 6
    assert [e.split(" of ")[0] for e in log.events] == ["float()", "int()", "bool()", "item()",
                                                        "tolist()", "bool()"]


def test_outside_a_guard_conversions_are_free_and_nested_guards_all_count():
    x = np.ones(2).view(DeviceLikeArray)
    assert float(x.sum()) == 2.0
    with no_host_transfers(strict=False) as outer:
        with no_host_transfers(strict=False) as inner:
            float(x.sum())
        float(x.max())
    assert (outer.count, inner.count) == (2, 1)
    assert isinstance(outer, TransferLog)


def test_an_inner_strict_guard_fails_even_inside_a_counting_one():
    with no_host_transfers(strict=False) as outer:
        with pytest.raises(HostTransferError):
            with no_host_transfers():
                note_transfer("a copy")
    assert outer.events == ["a copy"]


def test_array_math_keeps_the_device_like_type():
    """The substitute is only useful if numpy ops propagate it; check the ops a step uses."""
    a = np.ones((2, 3), np.float32).view(DeviceLikeArray)
    w = np.ones((3, 4), np.float32).view(DeviceLikeArray)
    for result in (a @ w, np.exp(a), a.sum(), np.zeros_like(a), a * 2.0, a.reshape(-1)):
        assert isinstance(result, DeviceLikeArray)


def test_forward_gradient_and_update_of_a_dense_model_make_no_host_round_trip():
    """The tape, structural ops, cross-entropy and an Adam update read no device value on the host."""
    rng = np.random.default_rng(0)
    model = on_device(mf.nn.Chain(mf.nn.Dense(5, 8, mf.tanh, rng=rng), mf.nn.Dense(8, 3, rng=rng)))
    opt = mf.optim.setup(mf.optim.Adam(1e-2), model)
    x = rng.standard_normal((4, 5)).astype(np.float32).view(DeviceLikeArray)
    y = np.array([0, 2, 1, 2])

    seen = []

    def loss_fn(m):
        logits = m(x)
        seen.append(type(logits.value))
        return mf.cross_entropy(logits, y)

    before = model[0].W.copy()
    with no_host_transfers() as log:
        loss, (grads,) = mf.withgradient(loss_fn, model)
        mf.optim.update(opt, model, grads)
    assert log.count == 0
    assert seen == [DeviceLikeArray] and isinstance(model[0].W, DeviceLikeArray)
    assert not np.array_equal(np.asarray(model[0].W), np.asarray(before))
    assert np.isfinite(float(loss))
