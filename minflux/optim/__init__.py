"""Optimisers in the style of Optimisers.jl: rules, state trees, clipping and schedules.

>>> import numpy as np, minflux as mf
>>> model = mf.nn.Dense(3, 1, rng=np.random.default_rng(0))
>>> state = mf.optim.setup(mf.optim.Adam(lr=1e-2), model)
>>> x, y = np.ones((4, 3), np.float32), np.zeros((4, 1), np.float32)
>>> loss, (grads,) = mf.withgradient(lambda m: mf.mean((m(x) - y) ** 2), model)
>>> mf.optim.update(state, model, grads)
"""
from .adaptive import AdaGrad, Adam, AdamW, Lion, RMSProp
from .basic import Descent, Momentum, Nesterov
from .clipping import ClipNorm, ClipValue, clip_by_global_norm, global_norm
from .decay import WeightDecay
from .rule import AccumulatorRule, GlobalRule, OptimiserChain, Rule, chain, hyperparameters
from .schedules import CosineDecay, ExponentialDecay, LinearWarmup, OneCycle, ReduceOnPlateau, StepDecay
from .state import Leaf, StateNode, adjust, freeze, named_state_leaves, setup, thaw, update

__all__ = ["AccumulatorRule", "AdaGrad", "Adam", "AdamW", "ClipNorm", "ClipValue", "CosineDecay",
           "Descent", "ExponentialDecay", "GlobalRule", "Leaf", "LinearWarmup", "Lion", "Momentum",
           "Nesterov", "OneCycle", "OptimiserChain", "RMSProp", "ReduceOnPlateau", "Rule", "StateNode",
           "StepDecay", "WeightDecay", "adjust", "chain", "clip_by_global_norm", "freeze", "global_norm",
           "hyperparameters", "named_state_leaves", "setup", "thaw", "update"]
