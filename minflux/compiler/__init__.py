"""The scalar-function compiler: Python source -> IR -> forward-mode transform -> kernels.

A pure bottom layer: it knows nothing of tapes or Tensors and imports only its own modules and
`minflux.backend`, `minflux.files` and `minflux._version`. `compiled.compiled(fn)` is the entry
point for Python source (the module `compiled` keeps its name here, so the function is not
re-exported); `expressions` builds the same `CompiledFunction` from expressions (a
computation held as data, as the fusion of deferred elementwise ops holds it). The tape side of
elementwise work lives in `minflux.pointwise`.

>>> import numpy as np
>>> from minflux.compiler import FunctionBuilder, argument
>>> b = FunctionBuilder()
>>> dual, outs = b.build([b.call("multiply", argument(np.arange(3.0), wrt=True), 2.0)]).run()
>>> outs, dual.constants       # the value; its partial 2 is a constant, never an array
([array([0., 2., 4.])], {(0, 0): 2.0})
"""
from .compiled import CompiledFunction, prepare, primal
from .expressions import Expression, ExpressionFunction, FunctionBuilder, argument, constant

# (`compiled` the function is not re-exported: the name is the module's, minflux.compiler.compiled)
__all__ = ["CompiledFunction", "Expression", "ExpressionFunction", "FunctionBuilder", "argument", "constant",
           "prepare", "primal"]
