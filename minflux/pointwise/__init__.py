"""The tape side of elementwise work: primitives (``mf.tanh``, ``mf.add`` ... from the derivative
table), scalar functions broadcast as one node (`elementwise`, `scalar_rule`, `broadcast`), the
broadcast node, and reverse mode.

>>> import minflux as mf, numpy as np
>>> mf.gradient(lambda x: mf.sum(mf.tanh(x)), np.zeros(2))[0]
array([1., 1.])
"""
