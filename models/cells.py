"""The HM-LSTM's elementwise pieces: the boundary detector and the cell update in two forms.

Each is one scalar function, compiled by minflux into one fused kernel that yields outputs and
per-element partials in a single pass (mixed mode).
"""
from __future__ import annotations

import minflux as mf


def _straight_through_slope(m, x, slope, y):
    """d step / dx as the hard sigmoid's slope: ``slope / 2`` where ``|x| < 1 / slope``, else 0."""
    return m.where(m.abs(x) * slope < 1.0, 0.5 * slope, 0.0)


@mf.scalar_rule(_straight_through_slope, None)
def boundary(x, slope):
    """The boundary detector z: 1 where the pre-activation is positive, else 0.

    Forward it is ``round(hard_sigm(slope * x))`` with ``hard_sigm(u) = clip((u + 1) / 2, 0, 1)``,
    which is a step at 0; backward it is the straight-through estimator with the hard sigmoid's slope.

    >>> import numpy as np
    >>> boundary(np.array([-0.3, 0.0, 0.2]), 1.0)
    array([0., 0., 1.])
    """
    if x > 0:
        return 1.0
    return 0.0


@mf.elementwise
def detect_boundary(x, slope):
    """`boundary` broadcast as a kernel of its own: ``z`` and its straight-through partial come out of
    one pass (a `scalar_rule` applied to arrays directly computes its value, then its rule with array
    operations), and the broadcast's ``mode`` applies to it.

    >>> import numpy as np
    >>> mf.gradient(lambda x: mf.sum(mf.broadcast(detect_boundary, x, 2.0)), np.array([-0.3, 0.2, 0.7]))[0]
    array([1., 1., 0.])
    """
    return boundary(x, slope)


@mf.elementwise
def hm_update(z, z_below, c, h, f, i, o, g):
    """HM-LSTM cell and hidden update with real branches on the boundary states.

    FLUSH when this layer's previous boundary ``z`` is 1 (``c = i g``); COPY when ``z = 0`` and the
    layer below did not fire (``c`` and ``h`` unchanged); UPDATE otherwise (``c = f c + i g``).
    ``f, i, o, g`` are pre-activations. Returns ``(c, h)``.

    >>> import numpy as np
    >>> c, h = hm_update(0.0, 0.0, np.array([0.5]), np.array([0.1]), 0.0, 0.0, 0.0, 0.0)
    >>> float(c[0]), float(h[0])
    (0.5, 0.1)
    """
    if z == 1:
        c_new = mf.sigmoid(i) * mf.tanh(g)
    elif z_below == 0:
        return c, h
    else:
        c_new = mf.sigmoid(f) * c + mf.sigmoid(i) * mf.tanh(g)
    return c_new, mf.sigmoid(o) * mf.tanh(c_new)


@mf.elementwise
def hm_update_blend(z, z_below, c, h, f, i, o, g):
    """The same update as `hm_update` written as the paper's arithmetic blend of the three operations.

    The cell state is the blend ``c' = z flush + (1 - z) z_below update + copy c`` with
    ``copy = (1 - z)(1 - z_below)``, and the hidden state is computed from it,
    ``h' = (1 - copy) sigmoid(o) tanh(c') + copy h`` (Chung, Ahn and Bengio 2017, Eq. 2-3 with the
    operations multiplied out). For binary ``z`` and ``z_below`` the values
    equal `hm_update`'s; the gradient differs: the blend passes gradient to ``z`` and ``z_below``
    through the choice of operation (``dc'/dz = flush - z_below update - (1 - z_below) c``), where the
    branch form gives them none.

    >>> import numpy as np
    >>> c, h = hm_update_blend(0.0, 0.0, np.array([0.5]), np.array([0.1]), 0.0, 0.0, 0.0, 0.0)
    >>> float(c[0]), float(h[0])
    (0.5, 0.1)
    """
    flush = mf.sigmoid(i) * mf.tanh(g)
    update = mf.sigmoid(f) * c + flush
    copy = (1 - z) * (1 - z_below)
    c_new = z * flush + (1 - z) * z_below * update + copy * c
    h_new = (1 - copy) * mf.sigmoid(o) * mf.tanh(c_new) + copy * h
    return c_new, h_new


@mf.elementwise
def cell_update(z, z_below, c, f, i, g):
    """The cell-state half of `hm_update`: the kernel of the mixed-mode paper's HM-LSTM benchmark.

    >>> import numpy as np
    >>> cell_update(0.0, 0.0, np.array([0.5]), 0.0, 0.0, 0.0)
    array([0.5])
    """
    if z == 1:                                               # FLUSH
        return mf.sigmoid(i) * mf.tanh(g)
    elif z_below == 0:                                       # COPY
        return c
    return mf.sigmoid(f) * c + mf.sigmoid(i) * mf.tanh(g)   # UPDATE
