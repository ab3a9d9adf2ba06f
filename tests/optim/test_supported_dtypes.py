"""Optimiser rules update float32 and float64 parameters; any other floating dtype is refused when
the state is set up, naming the parameter and the dtypes supported."""
import numpy as np
import pytest

from minflux import optim

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)


@pytest.mark.parametrize("rule", [optim.Adam(), optim.Descent(0.1), optim.chain(optim.ClipNorm(1.0), optim.Adam())])
@pytest.mark.parametrize("dtype", [np.float16, np.longdouble])
def test_a_parameter_of_an_unsupported_dtype_is_refused_naming_it_and_the_supported_dtypes(rule, dtype):
    if np.dtype(dtype) == np.float64:
        pytest.skip("longdouble is float64 on this platform")
    model = {"layers": [{"W": np.zeros(3, np.float32)}, {"W": np.zeros(3, dtype)}]}
    with pytest.raises(TypeError) as caught:
        optim.setup(rule, model)
    assert str(caught.value) == (f"optim.setup: parameter layers.1.W is {np.dtype(dtype).name}; optimiser rules "
                                 f"update float32 and float64 arrays (convert it, e.g. with .astype(np.float32))")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float32_and_float64_parameters_are_updated(dtype):
    w = {"w": np.zeros(2, dtype)}
    state = optim.setup(optim.Adam(0.1), w)
    optim.update(state, w, {"w": np.ones(2, dtype)})
    assert w["w"].dtype == dtype and (w["w"] < 0).all()
