"""Nothing silent about gradients: numpy functions on tracked Tensors, losses that do not depend on
the arguments, arrays of other frameworks and nested gradients are errors that name the fix."""
import numpy as np
import pytest

import minflux as mf

pytestmark = pytest.mark.numpy_kernels  # not a test of compiled kernels: they run on numpy (conftest.py)

X = np.array([1.0, -2.0, 0.5])

NUMPY_CALLS = {
    "np.concatenate": (lambda t: mf.sum(np.concatenate([t, t])), "mf.concatenate"),
    "np.stack": (lambda t: mf.sum(np.stack([t, t])), "mf.stack"),
    "np.clip": (lambda t: mf.sum(np.clip(t, 0.0, 1.0)), "mf.clip"),
    "np.dot": (lambda t: np.dot(t, t), "mf.dot"),
    "np.einsum": (lambda t: np.einsum("i,i", t, t), "mf.einsum"),
    "np.var": (lambda t: np.var(t), "mf.var"),
    "np.linalg.norm": (lambda t: mf.sum(t) + np.linalg.norm(t), "mf.norm"),
    "a conversion to a numpy array": (lambda t: mf.sum(np.asarray(t)), "minflux ops"),
    "Tensor.numpy()": (lambda t: mf.sum(t.numpy()), "minflux ops"),
}


@pytest.mark.parametrize("operation", sorted(NUMPY_CALLS))
def test_numpy_on_a_tracked_tensor_names_the_minflux_function(operation):
    f, instead = NUMPY_CALLS[operation]
    with pytest.raises(TypeError) as info:
        mf.gradient(f, X)
    message = str(info.value)
    assert operation in message and instead in message and __file__ in message


def test_the_minflux_functions_give_the_gradients_numpy_lost():
    g = mf.gradient(lambda t: mf.sum(t) + mf.norm(t), X)[0]
    np.testing.assert_allclose(g, 1 + X / np.linalg.norm(X))
    g = mf.gradient(lambda t: mf.sum(mf.concatenate([t, t])), X)[0]
    np.testing.assert_allclose(g, [2.0, 2.0, 2.0])


def test_numpy_functions_keep_working_outside_a_gradient():
    t = mf.Tensor(X)
    np.testing.assert_allclose(np.concatenate([t, t]), np.concatenate([X, X]))
    assert np.linalg.norm(t) == np.linalg.norm(X) and np.var(t) == np.var(X)
    np.testing.assert_array_equal(np.asarray(t), X)
    np.testing.assert_array_equal(t.numpy(), X)


def test_constants_and_metadata_inside_a_gradient_are_fine():
    def f(t):
        scale = np.linalg.norm(mf.stop_gradient(t))      # a constant, said so
        assert np.shape(t) == (3,) and np.ndim(t) == 1
        with mf.no_grad():
            np.asarray(t)                                  # explicitly untracked
        return mf.sum(t) * scale
    np.testing.assert_allclose(mf.gradient(f, X)[0], np.full(3, np.linalg.norm(X)))


@pytest.mark.parametrize("loss", [lambda t: 3.0, lambda t: 2, lambda t: np.ones(()),
                                  lambda t: mf.stop_gradient(mf.sum(t)), lambda t: float(mf.sum(t))],
                         ids=["float", "int", "untracked array", "stop_gradient", "float()"])
def test_a_loss_that_does_not_depend_on_the_arguments_is_an_error(loss):
    with pytest.raises(ValueError, match="does not depend on the arguments"):
        mf.gradient(loss, X)


def test_nothing_to_differentiate_is_an_error():
    with pytest.raises(ValueError, match="nothing to differentiate"):
        mf.gradient(lambda n: mf.sum(n), np.arange(3))


class ForeignArray:
    """What an array of another framework looks like to minflux: the DLPack protocol."""

    def __dlpack__(self, stream=None):  # pragma: no cover - never called
        raise AssertionError

    def __dlpack_device__(self):  # pragma: no cover
        return (1, 0)


@pytest.mark.parametrize("wrap", [lambda a: a, lambda a: {"layer": [a]}], ids=["argument", "inside a tree"])
def test_arrays_of_other_frameworks_are_refused(wrap):
    with pytest.raises(TypeError, match="ForeignArray.*mf.from_dlpack"):
        mf.gradient(lambda a, x: mf.sum(x), wrap(ForeignArray()), X)


def test_a_torch_tensor_is_refused():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="torch.Tensor"):
        mf.gradient(lambda t: mf.sum(t), torch.ones(3, dtype=torch.float64))


def test_a_nested_gradient_says_higher_order_is_not_supported():
    def outer(x):
        inner = mf.gradient(lambda y: mf.sum(y * x), X)[0]
        return mf.sum(inner)
    with pytest.raises(NotImplementedError, match="higher-order derivatives"):
        mf.gradient(outer, X)


def test_a_gradient_under_no_grad_is_a_constant_for_the_outer_one():
    def outer(x):
        with mf.no_grad():
            inner = mf.gradient(lambda y: mf.sum(y * y), X)[0]
        return mf.sum(x * inner)
    np.testing.assert_allclose(mf.gradient(outer, X)[0], 2 * X)
