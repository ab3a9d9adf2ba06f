"""The error a scalar function raises when the scalar-function compiler cannot compile it."""
from __future__ import annotations


class CompileError(Exception):
    """A scalar function uses a construct the scalar-function compiler does not support.

    The message names the file, the line, the construct and what to write instead.

    >>> import minflux as mf, numpy as np
    >>> def f(x):
    ...     return [x]
    >>> try:
    ...     mf.broadcast(f, np.ones(2))
    ... except mf.CompileError as e:
    ...     print(str(e).split(": ", 1)[1])
    a list is not supported in a scalar function; use scalars only (return a tuple for several outputs)
    """

    def __init__(self, message: str, loc: tuple | None = None, construct: str | None = None):
        where = f"{loc[0]}:{loc[1]}: " if loc else ""
        super().__init__(where + message)
        self.loc = loc
        self.construct = construct
