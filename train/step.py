"""One training step as one function: forward, backward, a finiteness check and the optimiser update.

`training_step` is written so that `minflux.compile` can replay it (``train.compile = true``, the
default): everything that depends on the data stays inside operations (the boundary decisions in the
cell kernels, the COPY-row skipping, the finiteness check, the clip), the HM-LSTM's annealed slope
comes in as a 0-d array (`slope_as_data`), and nothing is read to the host. Eager (``train.compile = false``) runs the
same function, so both give the same numbers to the last bit. A NaN or an infinity in the loss or a
gradient raises ``FloatingPointError`` before any parameter changes; `why_not_finite` then says which.

>>> import numpy as np, minflux as mf
>>> from minflux_models import LSTMLM
>>> model = LSTMLM(5, embed_size=4, hidden_sizes=(3,), rng=np.random.default_rng(0))
>>> opt_state = mf.optim.setup(mf.optim.Adam(0.01), model)
>>> x = np.zeros((2, 4), np.int64)
>>> loss, state, boundaries = training_step(model, opt_state, model.initial_state(2), x, x, None)
>>> round(float(loss), 4), boundaries
(1.5956, None)
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import inspect
import math

import numpy as np

import minflux as mf
from minflux import distributed

from .divergence import OVERFLOWED, describe_nonfinite, nonfinite_leaves, norm_checks_finiteness


def loss_and_gradients(model, state, inputs, targets, slope):
    """``((loss, new_state, boundaries), grads)``: the mean cross-entropy per character and its
    gradient with respect to ``model`` (``slope`` overrides the model's boundary slope when given)."""
    def loss_of(m):
        logits, new_state, boundaries = m(inputs, state) if slope is None else m(inputs, state, slope=slope)
        return mf.cross_entropy(logits, targets), new_state, boundaries

    with mf.fusion(compile_after=1):  # every step fused alike, whatever ran before: exact resume
        value, (grads,) = mf.withgradient(loss_of, model)
    return value, grads


def training_step(model, opt_state, state, inputs, targets, slope):
    """Train ``model`` on one window in place; returns ``(loss, new_state, boundaries)``.

    Over several MPI ranks the loss (in float64) and the gradients are averaged over all ranks before
    the check and the update (`minflux.distributed.allreduce_tree`, one operation of the recorded
    step), so every rank takes the same decision and the same update."""
    (loss, new_state, boundaries), grads = loss_and_gradients(model, state, inputs, targets, slope)
    if distributed.size() > 1:
        total, grads = distributed.allreduce_tree((loss.astype(np.float64)[None], grads))  # [None]: an array
        loss = total[0]
    # a throwing ClipNorm first reads the gradients' norm anyway: then only the loss is checked here
    checked = [] if norm_checks_finiteness(opt_state) else mf.tree.leaves(grads, trainable_only=False)
    _raise_unless_finite(loss, checked)
    mf.optim.update(opt_state, model, grads)
    return loss, new_state, boundaries


@mf.operation
def _raise_unless_finite(loss, grads: list) -> None:
    """One reduction over the loss and every gradient, and one read of it."""
    xp = mf.get_array_module(loss, *grads)
    total = xp.asarray(loss, dtype=np.float64)
    for g in grads:     # a float64 sum of finite float32 values is finite; a NaN or an inf is not
        total = total + g.sum(dtype=np.float64)
    if not math.isfinite(float(total)):
        raise FloatingPointError("the loss or a gradient is not finite")


def why_not_finite(model, state, inputs, targets, slope) -> str:
    """What made `training_step` stop: the loss, or the first arrays whose gradient is not finite."""
    (loss, _, _), grads = loss_and_gradients(model, state, inputs, targets, slope)
    loss = float(mf.to_numpy(loss))
    if not math.isfinite(loss):
        return f"the loss is {loss}"
    bad = nonfinite_leaves(grads)
    return describe_nonfinite(bad) if bad else OVERFLOWED


@contextlib.contextmanager
def slope_as_data(model):
    """For the duration of a step, the model's boundary slope as a 0-d array of its parameters' dtype,
    in the model and yielded to pass as ``slope=``; None (and nothing changed) for a model without one.

    A number in the model would be part of the compiled step's guard key, so every annealed value
    would record the step again; a 0-d array is data. The model's own number is back afterwards.

    >>> import numpy as np
    >>> from minflux_models import HMLSTM
    >>> model = HMLSTM(5, embed_size=4, hidden_sizes=(3, 3), slope=1.5, rng=np.random.default_rng(0))
    >>> with slope_as_data(model) as slope:
    ...     slope, model.slope is slope
    (array(1.5, dtype=float32), True)
    >>> model.slope
    1.5
    """
    number = getattr(model, "slope", None)
    if number is None or "slope" not in inspect.signature(type(model).__call__).parameters:
        yield None
        return
    first = mf.tree.leaves(model)[0]
    model.slope = mf.get_array_module(first).asarray(number, dtype=first.dtype)
    try:
        yield model.slope
    finally:
        model.slope = number


def _with_rate(rule, rate):
    """A copy of ``rule`` whose ``lr`` fields are ``rate`` (a chain's members copied alike)."""
    if isinstance(rule, mf.optim.OptimiserChain):
        return mf.optim.OptimiserChain(tuple(_with_rate(r, rate) for r in rule.rules))
    if not any(f.name == "lr" for f in dataclasses.fields(rule)):
        return rule
    copied = copy.copy(rule)
    object.__setattr__(copied, "lr", rate)  # a frozen rule; its checks ran on the number it holds
    return copied


@contextlib.contextmanager
def rate_as_data(opt_state, rate: float):
    """For the duration of a step, every rule's learning rate as one 0-d array of the optimiser
    state's dtype (yielded); the rules' own numbers are back afterwards.

    A schedule that changes the rate at every step would otherwise record the compiled step again at
    every step (a number in a rule is part of its guard key); a 0-d array is data, as in
    `slope_as_data`.

    >>> import numpy as np
    >>> state = mf.optim.setup(mf.optim.chain(mf.optim.ClipNorm(1.0), mf.optim.Adam(0.1)),
    ...                        {"w": np.zeros(2, np.float32)})
    >>> with rate_as_data(state, 0.05) as rate:
    ...     rate, state["w"].rule.rules[-1].lr is rate
    (array(0.05, dtype=float32), True)
    >>> state["w"].rule.rules[-1].lr
    0.1
    """
    leaves = [leaf for _, leaf in mf.optim.named_state_leaves(opt_state)]
    arrays = [a for leaf in leaves for a in mf.tree.leaves(leaf.state, trainable_only=False)
              if np.dtype(a.dtype).kind == "f"]
    if not arrays:
        yield None
        return
    value = mf.get_array_module(arrays[0]).asarray(rate, dtype=arrays[0].dtype)
    rules = [leaf.rule for leaf in leaves]
    swapped: dict[int, object] = {}  # one copy per rule object, so shared rules stay shared
    for leaf in leaves:
        leaf.rule = swapped.setdefault(id(leaf.rule), _with_rate(leaf.rule, value))
    try:
        yield value
    finally:
        for leaf, rule in zip(leaves, rules):
            leaf.rule = rule
