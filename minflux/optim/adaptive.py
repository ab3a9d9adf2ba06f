"""Adaptive rules (RMSProp, AdaGrad, Adam, AdamW); each per-element step is one elementwise kernel."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..pointwise.functions import elementwise
from ..runtime.native_runner import MAP_DTYPES, powers_words
from ..schedule import operation
from ..pointwise.primitives import sign, sqrt

from .rule import NON_NEGATIVE, UNIT, AccumulatorRule, Rule, xp_of


@elementwise
def rmsprop_step(g, acc, lr, rho, eps):
    """``acc' = rho * acc + (1 - rho) * g^2``; step ``lr * g / (sqrt(acc') + eps)``."""
    acc_new = rho * acc + (1.0 - rho) * g * g
    return lr * g / (sqrt(acc_new) + eps), acc_new


@elementwise
def adagrad_step(g, acc, lr, eps):
    """``acc' = acc + g^2``; step ``lr * g / (sqrt(acc') + eps)``."""
    acc_new = acc + g * g
    return lr * g / (sqrt(acc_new) + eps), acc_new


@elementwise
def adam_step(g, m, v, lr, beta1, beta2, eps, correction1, correction2):
    """Adam's moments and step; ``correction_k = 1 - beta_k ** t`` removes the zero-start bias."""
    m_new = beta1 * m + (1.0 - beta1) * g
    v_new = beta2 * v + (1.0 - beta2) * g * g
    step = lr * (m_new / correction1) / (sqrt(v_new / correction2) + eps)
    return step, m_new, v_new


@elementwise
def adamw_step(g, x, m, v, lr, beta1, beta2, eps, correction1, correction2, decay):
    """Adam's step plus decoupled weight decay ``lr * decay * x``."""
    step, m_new, v_new = adam_step(g, m, v, lr, beta1, beta2, eps, correction1, correction2)
    return step + lr * decay * x, m_new, v_new


@dataclass(frozen=True)
class RMSProp(AccumulatorRule):
    """RMSProp (Tieleman and Hinton 2012): ``acc = rho acc + (1-rho) g^2; x -= lr g / (sqrt(acc)+eps)``.

    >>> import numpy as np, minflux as mf
    >>> w = np.zeros(1)
    >>> state = mf.optim.setup(mf.optim.RMSProp(lr=0.1, rho=0.75, eps=0.0), w)
    >>> mf.optim.update(state, w, np.array([2.0])); w    # acc = 1, step 0.1 * 2 / 1
    array([-0.2])
    """

    lr: float = 0.001
    rho: float = 0.9
    eps: float = 1e-8
    limits = {"lr": NON_NEGATIVE, "rho": UNIT, "eps": NON_NEGATIVE}

    def apply(self, state, param, grad):
        delta, acc = rmsprop_step(grad, state, self.lr, self.rho, self.eps)
        return acc, delta


@dataclass(frozen=True)
class AdaGrad(AccumulatorRule):
    """AdaGrad (Duchi et al. 2011): ``acc += g^2; x -= lr g / (sqrt(acc) + eps)``, acc from zero.

    >>> import numpy as np, minflux as mf
    >>> w = np.zeros(1)
    >>> state = mf.optim.setup(mf.optim.AdaGrad(lr=0.1, eps=0.0), w)
    >>> mf.optim.update(state, w, np.array([3.0])); w    # step 0.1 * 3 / 3
    array([-0.1])
    """

    lr: float = 0.1
    eps: float = 1e-8
    limits = {"lr": NON_NEGATIVE, "eps": NON_NEGATIVE}

    def apply(self, state, param, grad):
        delta, acc = adagrad_step(grad, state, self.lr, self.eps)
        return acc, delta


@dataclass(frozen=True)
class Adam(Rule):
    """Adam (Kingma and Ba 2015) with bias correction; state ``(m, v, t)``, the step count ``t`` a
    0-d integer array (it changes at every update, so a compiled step takes it as data).

    ``m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; x -= lr (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)``.

    >>> import numpy as np, minflux as mf
    >>> w = np.zeros(1)
    >>> state = mf.optim.setup(mf.optim.Adam(lr=0.1, eps=0.0), w)
    >>> mf.optim.update(state, w, np.array([5.0])); w    # the first step is lr * sign(g)
    array([-0.1])
    """

    lr: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    limits = {"lr": NON_NEGATIVE, "beta1": UNIT, "beta2": UNIT, "eps": NON_NEGATIVE}

    def init(self, param):
        xp = xp_of(param)
        return xp.zeros_like(param), xp.zeros_like(param), xp.zeros((), np.int64)

    def apply(self, state, param, grad):
        m, v, t = state
        t += 1  # in place: a 0-d array stays one (t + 1 would be a numpy scalar)
        delta, m_new, v_new = adam_step(grad, m, v, self.lr, self.beta1, self.beta2, self.eps,
                                        *self.corrections(t, grad.dtype))
        return (m_new, v_new, t), delta

    def corrections(self, t, dtype):
        """The bias corrections ``1 - beta1^t`` and ``1 - beta2^t`` for step count array ``t``, as 0-d
        arrays of the gradients' ``dtype`` (the values a Python number of that dtype would take).

        >>> [c.tolist() for c in Adam(beta1=0.5, beta2=0.75).corrections(np.array(2), np.float32)]
        [0.75, 0.4375]
        """
        both = _bias_corrections(t, self.beta1, self.beta2, np.dtype(dtype))
        return both[0, ...], both[1, ...]


def _bias_corrections(t, beta1: float, beta2: float, dtype: np.dtype, out=None):
    """`Adam.corrections`, both in one array (or ``out``): a step count on the host is read once and
    raised in Python (one operation where array arithmetic took six; a native replay does the same with
    the C library's ``pow``, which Python's ``**`` of floats calls), one on a device stays there."""
    if t.__class__ is np.ndarray or isinstance(t, (int, np.integer)):
        n = int(t)
        made = np.array([dtype.type(1.0 - beta1 ** n), dtype.type(1.0 - beta2 ** n)], dtype)
    else:
        xp = xp_of(t)
        made = xp.stack([(1.0 - beta1 ** t).astype(dtype), (1.0 - beta2 ** t).astype(dtype)])
    if out is None:
        return made
    out[...] = made
    return out


def _powers_command(args: tuple, kwargs: dict, errstate: dict):
    """`_bias_corrections` of a host step count into ``out=`` as a native command (`powers_words`)."""
    (t, beta1, beta2, dtype), out = args, kwargs.get("out")
    if (t.__class__ is not np.ndarray or t.dtype != np.int64 or t.shape or out.__class__ is not np.ndarray
            or dtype not in MAP_DTYPES or out.dtype != dtype or out.shape != (2,) or not out.flags.c_contiguous
            or not out.flags.writeable or beta1.__class__ is not float or beta2.__class__ is not float):
        return None
    return powers_words(dtype, t.ctypes.data, (beta1, beta2), out.ctypes.data,
                        (_bias_corrections, (t, beta1, beta2, dtype, out)))   # called again where Python raises


_bias_corrections.native_command, _bias_corrections.fills_new_results = _powers_command, True
_bias_corrections = operation(_bias_corrections, results="out")


@dataclass(frozen=True)
class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov and Hutter 2019): Adam's step ``+ lr * decay * x``.

    >>> import numpy as np, minflux as mf
    >>> w = np.ones(1)
    >>> state = mf.optim.setup(mf.optim.AdamW(lr=0.1, eps=0.0, decay=0.5), w)
    >>> mf.optim.update(state, w, np.array([5.0])); w    # 1 - 0.1 * (1 + 0.5 * 1)
    array([0.85])
    """

    decay: float = 0.01
    limits = {**Adam.limits, "decay": NON_NEGATIVE}

    def apply(self, state, param, grad):
        m, v, t = state
        t += 1  # in place: a 0-d array stays one (t + 1 would be a numpy scalar)
        delta, m_new, v_new = adamw_step(grad, param, m, v, self.lr, self.beta1, self.beta2, self.eps,
                                         *self.corrections(t, grad.dtype), self.decay)
        return (m_new, v_new, t), delta


@elementwise
def lion_step(g, x, m, lr, beta1, beta2, decay):
    """Lion's sign step from the interpolated momentum, and the momentum's own update."""
    step = lr * (sign(beta1 * m + (1.0 - beta1) * g) + decay * x)
    return step, beta2 * m + (1.0 - beta2) * g


@dataclass(frozen=True)
class Lion(AccumulatorRule):
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"); state ``m``.

    ``x -= lr * (sign(beta1 m + (1 - beta1) g) + decay x)``, then ``m = beta2 m + (1 - beta2) g``.
    Every element moves by ``lr`` (plus decay), so ``lr`` is typically 3-10x smaller than Adam's.

    >>> import numpy as np, minflux as mf
    >>> w = np.zeros(2)
    >>> state = mf.optim.setup(mf.optim.Lion(lr=0.1), w)
    >>> mf.optim.update(state, w, np.array([5.0, -0.001])); w
    array([-0.1,  0.1])
    """

    lr: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.99
    decay: float = 0.0
    limits = {"lr": NON_NEGATIVE, "beta1": UNIT, "beta2": UNIT, "decay": NON_NEGATIVE}

    def apply(self, state, param, grad):
        delta, m = lion_step(grad, param, state, self.lr, self.beta1, self.beta2, self.decay)
        return m, delta
