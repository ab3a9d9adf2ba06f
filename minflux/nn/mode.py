"""Switching a whole model between training and evaluation behaviour (Flux's trainmode!/testmode!).

A layer that behaves differently while training (such as `Dropout`) has an attribute ``active``:
True (training behaviour), False (evaluation behaviour) or None (automatic: training behaviour only
while `mf.gradient` records). These functions set it on every such layer in a model, in place.
"""
from __future__ import annotations

from typing import Any

from ..tree import children

def _set_active(model: Any, active: bool | None) -> int:
    seen: set[int] = set()
    count = 0
    stack = [model]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        kids = children(x)
        if kids is None:
            continue
        if not isinstance(x, (list, tuple, dict)) and "active" in getattr(x, "__dict__", {}):
            x.active = active
            count += 1
        stack.extend(child for _, child in kids)
    return count


def _check(mode, name: str) -> None:
    if not (mode is True or mode is False or mode == "auto"):
        raise ValueError(f"mf.nn.{name}: mode must be True, False or 'auto', got {mode!r}")


def testmode(model: Any, mode: bool | str = True) -> Any:
    """Put every layer of ``model`` in evaluation behaviour (``mode=True``), in training behaviour
    (``False``) or back to automatic (``"auto"``: training behaviour only while a gradient is
    recorded). Returns ``model``, changed in place.

    Use it when a gradient is taken at test time (saliency maps, adversarial inputs), where
    automatic mode would run dropout.

    >>> import numpy as np, minflux as mf
    >>> model = mf.nn.Chain(mf.nn.Dropout(0.5, rng=np.random.default_rng(0)))
    >>> x = np.ones(4)
    >>> g_auto = mf.gradient(lambda x: mf.sum(model(x)), x)[0]      # dropout runs
    >>> _ = mf.nn.testmode(model)
    >>> mf.gradient(lambda x: mf.sum(model(x)), x)[0]               # it does not
    array([1., 1., 1., 1.])
    """
    _check(mode, "testmode")
    _set_active(model, None if mode == "auto" else not mode)
    return model


def trainmode(model: Any, mode: bool | str = True) -> Any:
    """Put every layer of ``model`` in training behaviour (``mode=True``), even outside a gradient
    computation; ``False`` is evaluation behaviour and ``"auto"`` the automatic default. Returns
    ``model``, changed in place.

    >>> import numpy as np, minflux as mf
    >>> drop = mf.nn.trainmode(mf.nn.Dropout(0.5, rng=np.random.default_rng(0)))
    >>> drop(np.ones(4))                                            # active without a gradient
    array([2., 0., 0., 0.])
    >>> mf.nn.trainmode(drop, "auto")(np.ones(4))
    array([1., 1., 1., 1.])
    """
    _check(mode, "trainmode")
    _set_active(model, None if mode == "auto" else bool(mode))
    return model
