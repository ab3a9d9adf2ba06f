"""LSTMCell: one step of a long short-term memory layer, a pure function of (x, state)."""
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
def lstm_update(a_i, a_f, a_g, a_o, c):
    """The LSTM cell update from the gate pre-activations: returns ``(h_new, c_new)``."""
    c_new = sigmoid(a_f) * c + sigmoid(a_i) * tanh(a_g)
    h_new = sigmoid(a_o) * tanh(c_new)
    return h_new, c_new


class LSTMCell(Module):
    """An LSTM step (Hochreiter and Schmidhuber 1997, with forget gate): ``h, state = cell(x, state)``.

    ``state = (h, c)``; None starts from zeros. The pre-activations ``x @ Wx + h @ Wh + b`` hold the
    gates in the order input, forget, cell candidate, output (blocks of ``hidden`` columns), and
    ``c' = sigmoid(f) * c + sigmoid(i) * tanh(g)``, ``h' = sigmoid(o) * tanh(c')`` is one elementwise
    kernel. ``Wx`` starts from ``init`` (Glorot uniform), each recurrent block of ``Wh`` from
    ``init_recurrent`` (orthogonal), the bias at zero except ``forget_bias`` on the forget gate.

    >>> import numpy as np, minflux as mf
    >>> cell = mf.nn.LSTMCell(3, 5, rng=np.random.default_rng(0))
    >>> h, (h_again, c) = cell(np.ones((2, 3), np.float32))
    >>> h.shape, c.shape, h is h_again
    ((2, 5), (2, 5), True)
    """

    def __init__(self, n_in: int, hidden: int, *, rng, init: Callable = initialisers.glorot_uniform,
                 init_recurrent: Callable = initialisers.orthogonal, forget_bias: float = 0.0,
                 dtype=None):
        check_sizes("LSTMCell", n_in=n_in, hidden=hidden)
        rng = as_generator(rng, "LSTMCell")
        self.Wx = init(rng, n_in, 4 * hidden, dtype=dtype)
        self.Wh = np.concatenate([init_recurrent(rng, hidden, hidden, dtype=dtype) for _ in range(4)],
                                 axis=1)
        self.b = initialisers.zeros(None, 4 * hidden, dtype=self.Wx.dtype)
        self.b[hidden:2 * hidden] = forget_bias
        self.hidden = hidden

    def initial_state(self, batch_shape: tuple | int = ()) -> tuple:
        """Zero ``(h, c)`` of shape ``batch_shape + (hidden,)`` on the weights' device and dtype."""
        batch_shape = (batch_shape,) if isinstance(batch_shape, int) else tuple(batch_shape)
        xp = get_array_module(self.Wx)
        dtype = self.Wx.dtype
        shape = batch_shape + (self.hidden,)
        return xp.zeros(shape, dtype=dtype), xp.zeros(shape, dtype=dtype)

    def __call__(self, x, state: tuple | None = None):
        shape = input_shape(self._repr_head(), x, self.Wx.shape[0])
        if state is None:
            state = self.initial_state(shape[:-1])
        h, c = state
        pre = matmul(x, self.Wx) + matmul(h, self.Wh) + self.b
        a_i, a_f, a_g, a_o = split(pre, 4, axis=-1)
        h_new, c_new = lstm_update(a_i, a_f, a_g, a_o, c)
        return h_new, (h_new, c_new)

    def _repr_head(self) -> str:
        return f"LSTMCell({self.Wx.shape[0]} => {self.hidden})"
