"""Compiled elementwise kernels launched as steps of a recorded schedule.

The compiler's launches are plain calls (`minflux.compiler.launch_kernel`). `launch` is the same call
as an `operation`: inside `mf.compile`'s recording a kernel launch is one step, and its replay calls
the numba kernel already bound to the recorded arrays' layout (`minflux.compiler.bound_launch`),
writing the outputs into the buffers the replay plans for them. Every elementwise launch of the tape
side (`broadcast`, lazy fusion, scalar rules on arrays) goes through it.

>>> import numpy as np
>>> from minflux.compiler import compiled, prepare
>>> cf = compiled(lambda x: x + 1.0)
>>> kinds, float_dtype, arrays, shape = prepare([np.zeros(2)], "increment")
>>> cf.run(arrays, kinds, float_dtype, (), shape, launch=launch)[1]
[array([1., 1.])]
"""
from __future__ import annotations

from ..compiler import bound_launch, launch_kernel
from ..schedule import operation

__all__ = ["launch"]

launch = operation(launch_kernel, replayed=bound_launch, results="new", replayed_results="out")
"""`launch_kernel` as one step of a recording; replayed as the `bound_launch` of its layout."""
