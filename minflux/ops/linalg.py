"""Matrix multiplication with numpy's rules: batched over leading axes, 1-D operands promoted."""
from __future__ import annotations

from ..autograd import record
from ..backend import get_array_module
from ..broadcasting import sum_to
from ..matrix_product import matmul as product
from ..product_gradient import ProductGradient
from ..runtime import SettingError
from ._common import shape_of, value_of
from ._shared_transpose import shared_transpose


def matmul(a, b):
    """Matrix product ``a @ b`` (batched over broadcast leading axes, vectors promoted as numpy does).

    >>> import minflux as mf, numpy as np
    >>> mf.matmul(np.ones((5, 2, 3)), np.ones((3, 4))).shape
    (5, 2, 4)
    """
    av, bv = value_of(a), value_of(b)
    xp = get_array_module(av, bv, op="mf.matmul (@)")
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        raise ValueError(f"mf.matmul: operands must have at least one dimension, got shapes {sa} and "
                         f"{sb}; use * to multiply by a scalar")
    try:
        out = product(av, bv)
    except SettingError:
        raise
    except ValueError as e:
        raise ValueError(f"mf.matmul: shapes {sa} and {sb} do not match (the last axis of the first "
                         "must equal the second-to-last axis of the second, and leading axes must "
                         "broadcast)") from e
    b_transposed = shared_transpose(b, bv) if bv.ndim == 2 else None

    def vjp(g, needs):
        a2 = av[None, :] if av.ndim == 1 else av
        b2 = bv[:, None] if bv.ndim == 1 else bv
        if bv.ndim == 1:  # restore the axes numpy dropped: the column of b first, then the row of a
            g = xp.expand_dims(g, -1)
        if av.ndim == 1:
            g = xp.expand_dims(g, -2)
        ga = gb = None
        if needs[0]:
            b_t = b_transposed.get() if b_transposed is not None else xp.swapaxes(b2, -1, -2)
            ga = sum_to(product(g, b_t), a2.shape).reshape(sa)
        if needs[1]:
            if a2.ndim == 2 and bv.ndim == 2:  # kept as factors: see ProductGradient
                gb = ProductGradient(a2, g)
            elif b2.ndim == 2 and a2.ndim > 2:  # rows times one matrix: one GEMM, no batch to sum
                gb = product(a2.reshape(-1, a2.shape[-1]).T, g.reshape(-1, g.shape[-1])).reshape(sb)
            else:
                gb = sum_to(xp.matmul(xp.swapaxes(a2, -1, -2), g), b2.shape).reshape(sb)
        return [ga, gb]

    return record("matmul", out, [a, b], vjp)
