"""Character language models built from the public minflux API: the HM-LSTM and an LSTM baseline.

>>> import numpy as np
>>> from minflux_models import HMLSTM
>>> HMLSTM(5, embed_size=4, hidden_sizes=(3, 3), rng=np.random.default_rng(0)).parameter_count() > 0
True
"""
from .boundaries import BoundaryStats, annealed_slope, boundary_rates, operations, rates_by_position
from .hmlstm import HMLSTM, HMLSTMLayer
from .lstm import LSTMLM

__all__ = ["BoundaryStats", "HMLSTM", "HMLSTMLayer", "LSTMLM", "annealed_slope", "boundary_rates",
           "operations", "rates_by_position"]
