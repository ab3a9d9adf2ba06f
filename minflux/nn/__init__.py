"""Layers: plain classes whose array attributes are their parameters (Flux style).

>>> import numpy as np, minflux as mf
>>> model = mf.nn.Chain(mf.nn.Dense(2, 3, mf.relu, rng=np.random.default_rng(0)))
>>> model.parameter_count()
9
"""
from . import init
from .chain import Chain
from .combinators import Identity, Parallel, SkipConnection
from .dense import Dense
from .dropout import Dropout
from .embedding import Embedding
from .gru import GRUCell
from .layernorm import LayerNorm
from .lstm import LSTMCell
from .module import Module, named_parameters, parameter_count, summary
from .mode import testmode, trainmode
from .recurrence import Recurrence
from .stacked import RNN

__all__ = ["Chain", "Dense", "Dropout", "Embedding", "GRUCell", "Identity", "LSTMCell", "LayerNorm", "Module",
           "Parallel", "RNN", "Recurrence", "SkipConnection", "init", "named_parameters", "parameter_count",
           "summary", "testmode", "trainmode"]
