"""GRUCell: one step of a gated recurrent unit, a pure function of (x, h)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..backend import get_array_module
from ..ops import matmul, split
from ..pointwise.functions import elementwise
from ..pointwise.primitives import sigmoid, tanh

from . import init as initialisers
from ._checks import check_sizes, input_shape
from ._rng import as_generator
from .module import Module


@elementwise
def gru_update(x_r, x_z, x_n, h_r, h_z, h_n, bh, h):
    """The GRU state update from the input and recurrent pre-activations of each gate."""
    r = sigmoid(x_r + h_r)
    z = sigmoid(x_z + h_z)
    n = tanh(x_n + r * (h_n + bh))
    return (1.0 - z) * n + z * h


class GRUCell(Module):
    """A GRU step (Cho et al. 2014), in PyTorch's formulation: ``h, h = cell(x, h)``.

    With gates in the order reset, update, candidate (blocks of ``hidden`` columns of ``Wx`` and
    ``Wh``)::

        r = sigmoid(x Wx_r + h Wh_r + b_r)
        z = sigmoid(x Wx_z + h Wh_z + b_z)
        n = tanh(x Wx_n + b_n + r * (h Wh_n + bh))
        h' = (1 - z) * n + z * h

    The reset gate scales the candidate's recurrent term including its own bias ``bh``, as in
    ``torch.nn.GRUCell`` and cuDNN. The gate arithmetic is one elementwise kernel. ``Wx`` starts
    from ``init`` (Glorot uniform), each recurrent block of ``Wh`` from ``init_recurrent``
    (orthogonal), biases at zero. The state is the array ``h`` (None starts from zeros).

    >>> import numpy as np, minflux as mf
    >>> cell = mf.nn.GRUCell(3, 5, rng=np.random.default_rng(0))
    >>> y, h = cell(np.ones((2, 3), np.float32))
    >>> y.shape, y is h
    ((2, 5), True)
    """

    def __init__(self, n_in: int, hidden: int, *, rng, init: Callable = initialisers.glorot_uniform,
                 init_recurrent: Callable = initialisers.orthogonal, dtype=None):
        check_sizes("GRUCell", n_in=n_in, hidden=hidden)
        rng = as_generator(rng, "GRUCell")
        self.Wx = init(rng, n_in, 3 * hidden, dtype=dtype)
        self.Wh = np.concatenate([init_recurrent(rng, hidden, hidden, dtype=dtype) for _ in range(3)],
                                 axis=1)
        self.b = initialisers.zeros(None, 3 * hidden, dtype=self.Wx.dtype)
        self.bh = initialisers.zeros(None, hidden, dtype=self.Wx.dtype)
        self.hidden = hidden

    def initial_state(self, batch_shape: tuple | int = ()):
        """Zero ``h`` of shape ``batch_shape + (hidden,)`` on the weights' device and dtype."""
        batch_shape = (batch_shape,) if isinstance(batch_shape, int) else tuple(batch_shape)
        xp = get_array_module(self.Wx)
        return xp.zeros(batch_shape + (self.hidden,), dtype=self.Wx.dtype)

    def __call__(self, x, state=None):
        shape = input_shape(self._repr_head(), x, self.Wx.shape[0])
        h = self.initial_state(shape[:-1]) if state is None else state
        x_r, x_z, x_n = split(matmul(x, self.Wx) + self.b, 3, axis=-1)
        h_r, h_z, h_n = split(matmul(h, self.Wh), 3, axis=-1)
        h_new = gru_update(x_r, x_z, x_n, h_r, h_z, h_n, self.bh, h)
        return h_new, h_new

    def _repr_head(self) -> str:
        return f"GRUCell({self.Wx.shape[0]} => {self.hidden})"
