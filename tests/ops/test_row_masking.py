"""mf.row_masked_matmul: the masked product's value and gradient, whether the rows are skipped or not."""
import numpy as np
import pytest

import minflux as mf
import minflux.ops.row_masking as row_masking
from minflux.testing import check_grad

RNG = np.random.default_rng(3)
X, W = RNG.normal(size=(6, 4)), RNG.normal(size=(4, 5))
KEEP = np.array([True, False, True, False, False, True])


def masked_product(x, w, keep, columns):
    """The definition, written independently: the product with the dropped rows' leading columns zero."""
    out = x @ w
    out[~keep, :columns] = 0.0
    return out


@pytest.fixture(params=["dense", "skipping"])
def path(request, monkeypatch):
    calls = []
    product = row_masking.product
    monkeypatch.setattr(row_masking, "product", lambda a, b, out=None: calls.append(a.shape[0]) or product(a, b, out))
    monkeypatch.setattr(row_masking, "SKIP_MIN_FRACTION", 2.0 if request.param == "dense" else 0.0)
    monkeypatch.setattr(row_masking, "SKIP_MIN_WORK", 0)
    return request.param, calls


@pytest.mark.parametrize("columns", [0, 3, 5])
def test_value_is_the_masked_product_on_either_path(path, columns):
    name, calls = path
    np.testing.assert_allclose(mf.row_masked_matmul(X, W, KEEP, columns), masked_product(X, W, KEEP, columns),
                               rtol=1e-13, atol=1e-14)
    assert (min(calls) == KEEP.sum()) == (name == "skipping")   # the skipping path formed fewer rows


@pytest.mark.parametrize("columns", [0, 3, 5])
def test_gradients_against_finite_differences_on_either_path(path, columns):
    weights = RNG.normal(size=(6, 5))
    check_grad(lambda x, w: mf.sum(mf.row_masked_matmul(x, w, KEEP, columns) * weights), X, W)


def test_bad_arguments_are_one_clear_error():
    with pytest.raises(ValueError, match="keep must be a boolean array of 6 elements"):
        mf.row_masked_matmul(X, W, np.ones(6), 2)
    with pytest.raises(ValueError, match=r"columns must lie in \[0, 5\]"):
        mf.row_masked_matmul(X, W, KEEP, 6)
    with pytest.raises(ValueError, match=r"needs x \(B, K\) and w \(K, N\)"):
        mf.row_masked_matmul(X, W.T, KEEP, 2)
