"""The iteration cap of ``while`` loops in scalar functions, and the error raised when it is reached.

A ``while`` loop whose condition never turns false would spin forever inside a compiled kernel
(numba releases no control to Python, so even Ctrl-C waits for it) and, in reverse mode, record
tape nodes without bound. The frontend therefore gives every ``while`` loop an iteration counter:
a lane whose loop runs more than `get_max_loop_iterations` times leaves it and reports the loop
through an extra integer output of the function, and the caller raises `LoopLimitError` naming
the function, the file and the line. ``for k in range(...)`` loops are bounded by their range and
are not counted. The cap is a compile-time constant: changing it recompiles what it affects.

>>> import minflux as mf, numpy as np
>>> def forever(x):
...     while x > 0:
...         x = x + 1
...     return x
>>> before = mf.get_max_loop_iterations()
>>> mf.set_max_loop_iterations(50)
>>> try:
...     mf.broadcast(forever, np.array([-1.0, 1.0]))
... except mf.LoopLimitError as e:
...     print(str(e).split(": ", 1)[1][:61])
the while loop in forever ran more than 50 iterations on 1 of
>>> mf.set_max_loop_iterations(before)
"""
from __future__ import annotations


import numpy as np

from .ir import Const, Return, breaks_out, returns
from ..runtime import settings

__all__ = ["LoopLimitError", "capped_exit", "get_max_loop_iterations", "set_max_loop_iterations"]

FLAG = "loop_capped"  # the IR variable holding 0, or 1 + the index of the loop that hit the cap


class LoopLimitError(RuntimeError):
    """A ``while`` loop of a scalar function ran more iterations than `get_max_loop_iterations`.

    ``loc`` is ``(file, line)`` of the loop, ``function`` the scalar function it belongs to.
    """

    def __init__(self, message: str, loc: tuple, function: str):
        super().__init__(f"{loc[0]}:{loc[1]}: {message}")
        self.loc = loc
        self.function = function


def get_max_loop_iterations() -> int:
    """The most iterations a ``while`` loop in a scalar function may run on one element.

    The environment variable ``MINFLUX_MAX_LOOP_ITERATIONS`` sets the initial value (default 100000).

    >>> import minflux as mf
    >>> mf.get_max_loop_iterations() >= 1
    True
    """
    return settings.get("max_loop_iterations")


def set_max_loop_iterations(n: int) -> None:
    """Set the iteration cap of ``while`` loops in scalar functions (see `get_max_loop_iterations`).

    >>> import minflux as mf
    >>> before = mf.get_max_loop_iterations()
    >>> mf.set_max_loop_iterations(1000); mf.get_max_loop_iterations()
    1000
    >>> mf.set_max_loop_iterations(before)
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"the loop iteration cap must be a positive integer, got {n!r}")
    settings.set("max_loop_iterations", int(n))


def check_loop_flags(flags, sites: list, name: str, limit: int) -> None:
    """Raise `LoopLimitError` when any element of ``flags`` (the flag output) reports a capped loop.

    ``sites[i]`` is ``(function, (file, line))`` of the loop reported as ``i + 1``.
    """
    flags = np.asarray(flags) if not hasattr(flags, "any") else flags
    if not bool(flags.any()):
        return
    if not isinstance(flags, np.ndarray):  # a CuPy array: the error path may copy to the host
        flags = flags.get()
    flags = np.asarray(flags)
    hit = flags[flags != 0]
    site = int(hit.flat[0])
    function, loc = sites[site - 1]
    where = function if function == name else f"{function} (inlined into {name})"
    raise LoopLimitError(
        f"the while loop in {where} ran more than {limit} iterations on {hit.size} of {flags.size} "
        f"element(s) and was stopped. If it never ends, fix its condition; if it needs more "
        f"iterations, raise the cap with mf.set_max_loop_iterations(n) or MINFLUX_MAX_LOOP_ITERATIONS.", loc, function)


def capped_exit(cond, body: list, loc) -> list:
    """What follows ``while True:`` (``cond`` a true constant) whose ``body`` never breaks out: the
    loop ends only by a ``return`` or by the iteration cap, so control after it is reached only by
    lanes the cap stopped. They get a copy of the body's first ``return`` (its values are never used:
    the caller raises `LoopLimitError` for them), which keeps the function from falling off its end.

    >>> from minflux.compiler.ir import Var
    >>> capped_exit(Const(True), [Return((Var("x"),))], None)
    [Return(values=(Var(name='x'),), loc=None)]
    >>> capped_exit(Var("c"), [Return((Var("x"),))], None)
    []
    """
    if not (isinstance(cond, Const) and cond.value) or breaks_out(body):
        return []
    first = next(returns(body), None)
    return [] if first is None else [Return(tuple(first.values), loc)]
