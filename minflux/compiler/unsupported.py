"""Python constructs a scalar function may not use, each with what to write instead.

>>> import ast
>>> UNSUPPORTED_STMT[ast.Try][0]
'try'
"""
from __future__ import annotations

import ast

UNSUPPORTED_EXPR = {
    ast.List: ("a list", "use scalars only (return a tuple for several outputs)"),
    ast.Dict: ("a dict", "use scalars only"),
    ast.Set: ("a set", "use scalars only"),
    ast.ListComp: ("a list comprehension", "use a for loop over range() with scalar accumulators"),
    ast.SetComp: ("a set comprehension", "use scalars only"),
    ast.DictComp: ("a dict comprehension", "use scalars only"),
    ast.GeneratorExp: ("a generator expression", "use a for loop over range()"),
    ast.Lambda: ("a lambda inside a scalar function", "define an @mf.elementwise function and call it"),
    ast.Subscript: ("indexing", "pass the element as its own argument; broadcasting indexes for you"),
    ast.Starred: ("*-unpacking", "pass arguments one by one"),
    ast.JoinedStr: ("an f-string", "use numbers only"),
    ast.NamedExpr: ("an assignment expression (:=)", "assign in a separate statement"),
    ast.Await: ("await", "use plain scalar code"),
    ast.Yield: ("yield", "return the values"),
    ast.YieldFrom: ("yield from", "return the values"),
    ast.Slice: ("a slice", "pass elements as arguments"),
}
UNSUPPORTED_STMT = {
    ast.Try: ("try", "remove the try; kernels cannot raise (invalid values give nan)"),
    ast.Raise: ("raise", "return nan or a flag output instead"),
    ast.Assert: ("assert", "check inputs before the broadcast"),
    ast.With: ("with", "remove the with block"),
    ast.Import: ("import", "import at module level and use math.* or mf.*"),
    ast.ImportFrom: ("import", "import at module level and use math.* or mf.*"),
    ast.FunctionDef: ("a nested function", "define it at module level with @mf.elementwise"),
    ast.AsyncFunctionDef: ("an async function", "define a plain @mf.elementwise function"),
    ast.ClassDef: ("a class definition", "use scalars only"),
    ast.Delete: ("del", "remove the del statement"),
    ast.Global: ("assignment to a global (global statement)", "return the value as an output"),
    ast.Nonlocal: ("nonlocal", "return the value as an output"),
    ast.AsyncFor: ("async for", "use for k in range(n)"),
    ast.AsyncWith: ("async with", "remove the with block"),
}
if hasattr(ast, "Match"):
    UNSUPPORTED_STMT[ast.Match] = ("match", "use if/elif/else")
if hasattr(ast, "TryStar"):
    UNSUPPORTED_STMT[ast.TryStar] = ("try", "remove the try; kernels cannot raise")
