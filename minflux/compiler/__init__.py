"""The scalar-function compiler: Python source -> IR -> forward-mode transform -> kernels.

The bottom layer of minflux's elementwise work: it knows nothing of tapes, Tensors or recorded
schedules, and imports only its own modules, `minflux.runtime` (settings, threads, kernel loading)
and `minflux.backend` (the array module of the values it gets). `compiled(fn)` is the entry point for
Python source; `FunctionBuilder` builds the same `CompiledFunction` from expressions (a computation
held as data, as the fusion of deferred elementwise ops holds it). A kernel runs through
`launch_kernel`, a plain call (`bound_launch`: one whose kernel and layout are chosen once); the tape
side of elementwise work, which records those launches, lives in `minflux.pointwise`.

This module is the compiler's face: code outside the compiler imports what it needs from here, never
from the modules inside it.

>>> import numpy as np
>>> from minflux.compiler import FunctionBuilder, argument
>>> b = FunctionBuilder()
>>> dual, outs = b.build([b.call("multiply", argument(np.arange(3.0), wrt=True), 2.0)]).run()
>>> outs, dual.constants       # the value; its partial 2 is a constant, never an array
([array([0., 2., 4.])], {(0, 0): 2.0})
"""
from .compiled_function import (KERNEL_MODES, BoundLaunch, CompiledFunction, bound_launch, compiled,
                                get_elementwise_backend, launch_kernel, prepare, primal, set_elementwise_backend)
from .dependence import differentiable_dependence
from .dtypes import FLOAT_DTYPES, kind_dtype
from .errors import CompileError
from .expressions import Expression, ExpressionFunction, FunctionBuilder, argument, constant
from .ir import If, Loop, result_kind, walk
from .layout import row_stride
from .loop_limit import LoopLimitError, get_max_loop_iterations, set_max_loop_iterations
from .numpy_backend import ArrayOps, evaluate
from .rules import TABLE, ArrayMath, Primitive, define
from .scalar_rule import ScalarRule, rule_of
from .source import global_names

__all__ = ["FLOAT_DTYPES", "KERNEL_MODES", "TABLE", "ArrayMath", "ArrayOps", "BoundLaunch", "CompileError",
           "CompiledFunction",
           "Expression", "ExpressionFunction", "FunctionBuilder", "If", "Loop", "LoopLimitError", "Primitive",
           "ScalarRule", "argument", "bound_launch", "compiled", "constant", "define", "differentiable_dependence",
           "evaluate", "get_elementwise_backend", "get_max_loop_iterations", "global_names", "kind_dtype",
           "launch_kernel", "prepare", "primal", "result_kind", "row_stride", "rule_of", "set_elementwise_backend", "set_max_loop_iterations",
           "walk"]
