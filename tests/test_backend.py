"""Backends: numpy/CuPy selection, devices, default dtype, scatter-add; CuPy is faked where absent."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf
from minflux.backend import DeviceError, scatter_add
from minflux.device import resolve_device


def test_get_array_module_defaults_to_numpy():
    assert mf.get_array_module(np.ones(2), 3.0, mf.Tensor(np.ones(1))) is np
    assert mf.get_array_module() is np


def test_fake_cupy_arrays_select_cupy(fake_cupy):
    assert mf.get_array_module(fake_cupy.asarray([1.0]), 2.0) is fake_cupy
    assert mf.get_array_module(mf.Tensor(fake_cupy.asarray([1.0]))) is fake_cupy
    assert mf.is_array(fake_cupy.asarray([1.0]))


def test_mixing_numpy_and_cupy_names_the_op_the_types_and_the_fix(fake_cupy):
    with pytest.raises(DeviceError) as info:
        mf.get_array_module(np.ones(2), fake_cupy.asarray([1.0]), op="mf.matmul (@)")
    message = str(info.value)
    for part in ("mf.matmul (@)", "numpy.ndarray", "cupy.ndarray", 'mf.to_device(model, "gpu")'):
        assert part in message


def test_to_device_cpu_is_identity_for_numpy():
    w = np.ones(2)
    moved = mf.to_device({"w": w, "n": 1}, "cpu")
    assert moved["w"] is w and moved["n"] == 1


def test_gpu_without_cupy_is_an_error(monkeypatch):
    import minflux.backend as backend

    monkeypatch.setattr(backend, "_cupy", None)
    with pytest.raises(DeviceError, match=r'"gpu" was requested but CuPy is not installed.*"cpu" or "auto"'):
        mf.to_device(np.ones(2), "gpu")


def test_auto_without_a_gpu_falls_back_with_one_warning(monkeypatch):
    import minflux.backend as backend

    monkeypatch.setattr(backend, "_cupy", None)
    with pytest.warns(RuntimeWarning, match='"auto" falls back to the CPU') as record:
        out = mf.to_device([np.ones(2), np.zeros(1)], "auto")
    assert len(record) == 1
    assert isinstance(out[0], np.ndarray)


def test_unknown_device_is_an_error():
    with pytest.raises(ValueError, match='device must be "cpu", "gpu" or "auto", got \'tpu\''):
        resolve_device("tpu")


def test_to_device_round_trip_with_fake_cupy(fake_cupy):
    class Model:
        def __init__(self):
            self.W = np.arange(4.0).reshape(2, 2)
            self.tied = self.W
            self.name = "m"

    model = Model()
    on_gpu = mf.to_device(model, "gpu")
    assert isinstance(on_gpu.W, fake_cupy.ndarray) and on_gpu.tied is on_gpu.W and on_gpu.name == "m"
    assert isinstance(model.W, np.ndarray)  # the original is not modified
    back = mf.to_device(on_gpu, "cpu")
    np.testing.assert_array_equal(back.W, model.W)
    assert back.tied is back.W
    assert mf.to_numpy(on_gpu.W).tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_default_dtype():
    assert mf.default_dtype() == np.float32
    mf.set_default_dtype(np.float64)
    try:
        assert mf.default_dtype() == np.float64
    finally:
        mf.set_default_dtype(np.float32)
    with pytest.raises(TypeError, match="floating type"):
        mf.set_default_dtype(np.int32)


@pytest.mark.parametrize("shape,index", [((10, 3), "rows"), ((10,), "rows"), ((4, 5), "tuple")])
def test_scatter_add_matches_add_at(shape, index, rng):
    if index == "rows":
        index = rng.integers(-shape[0], shape[0], (6, 7))
        values = rng.standard_normal(index.shape + shape[1:])
    else:
        index = (rng.integers(0, 4, 9), rng.integers(0, 5, 9))
        values = rng.standard_normal(9)
    expected = np.zeros(shape)
    np.add.at(expected, index, values)
    got = np.zeros(shape)
    scatter_add(got, index, values)
    np.testing.assert_allclose(got, expected)


def test_scatter_add_broadcasts_values():
    got = np.zeros((3, 2))
    scatter_add(got, np.array([0, 0, 2]), np.ones(2))
    np.testing.assert_array_equal(got, [[2, 2], [0, 0], [1, 1]])


@pytest.mark.gpu
def test_gradient_on_the_gpu_matches_the_cpu(rng):
    import cupy

    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    f = lambda w, x: mf.cross_entropy(mf.tanh(x @ w), np.array([0, 1, 1, 0]))  # noqa: E731
    cpu = mf.gradient(f, w, x)[0]
    gpu_f = lambda w, x: mf.cross_entropy(mf.tanh(x @ w), cupy.asarray([0, 1, 1, 0]))  # noqa: E731
    gpu = mf.gradient(gpu_f, mf.to_device(w, "gpu"), mf.to_device(x, "gpu"))[0]
    assert isinstance(gpu, cupy.ndarray)
    np.testing.assert_allclose(mf.to_numpy(gpu), cpu, rtol=1e-10)
