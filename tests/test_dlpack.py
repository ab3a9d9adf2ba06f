"""DLPack both ways: mf.from_dlpack and minflux arrays/Tensors read by torch and JAX, sharing memory."""
from __future__ import annotations

import numpy as np
import pytest

import minflux as mf


def test_from_dlpack_shares_memory_with_a_numpy_producer():
    source = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    view = mf.from_dlpack(source)
    assert isinstance(view, np.ndarray) and view.dtype == np.float32 and view.shape == (2, 3)
    source[1, 2] = -1.0
    assert view[1, 2] == -1.0


def test_from_dlpack_rejects_objects_without_the_protocol():
    with pytest.raises(TypeError, match="__dlpack__"):
        mf.from_dlpack([1.0, 2.0])


def test_torch_tensors_come_in_without_a_copy_and_differentiate():
    torch = pytest.importorskip("torch")
    t = torch.arange(4, dtype=torch.float64)
    x = mf.from_dlpack(t)
    t[0] = 10.0
    assert x[0] == 10.0
    g, = mf.gradient(lambda x: mf.sum(x * x), x)
    np.testing.assert_array_equal(g, 2 * t.numpy())


def test_minflux_results_and_tensors_go_to_torch_without_a_copy():
    torch = pytest.importorskip("torch")
    y = mf.tanh(np.linspace(-1, 1, 5))
    t = torch.from_dlpack(y)
    y[0] = 42.0
    assert t[0].item() == 42.0
    tensor = mf.Tensor(np.ones(3, np.float32))
    t2 = torch.from_dlpack(tensor)
    tensor.value[1] = 5.0
    assert t2.dtype == torch.float32 and t2.tolist() == [1.0, 5.0, 1.0]


def test_tensors_inside_a_gradient_export_their_value():
    torch = pytest.importorskip("torch")
    seen = []

    def f(x):
        h = mf.tanh(x)
        seen.append(torch.from_dlpack(h).clone())     # e.g. logging an activation with torch code
        return mf.sum(h)
    mf.gradient(f, np.zeros(2))
    assert seen[0].tolist() == [0.0, 0.0]


def test_jax_reads_minflux_arrays():
    jax = pytest.importorskip("jax")
    y = mf.exp(np.zeros(3, np.float32))
    np.testing.assert_array_equal(np.asarray(jax.dlpack.from_dlpack(y)), [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(mf.from_dlpack(jax.numpy.arange(3.0)), [0.0, 1.0, 2.0])


@pytest.mark.gpu
def test_cupy_round_trip_through_torch_on_the_device():
    import cupy

    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    x = cupy.arange(4, dtype=cupy.float32)
    t = torch.from_dlpack(x)
    back = mf.from_dlpack(t)
    assert isinstance(back, cupy.ndarray)
    x[0] = 9.0
    assert float(back[0]) == 9.0 and t[0].item() == 9.0
