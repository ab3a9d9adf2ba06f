"""Optimiser state trees (Optimisers.jl style): ``setup``, ``update``, ``adjust``, ``freeze``, ``thaw``.

``setup(rule, model)`` mirrors the model: each object becomes a `StateNode` with the same attribute
names, lists / tuples / dicts stay lists / tuples / dicts, and each trainable float array becomes a
`Leaf` holding the rule, its state and a frozen flag. Branches without parameters are left out, and a
tied array (the same array in two places) gets one `Leaf` seen from both places, so it is updated once
with one state. ``update`` changes the model's arrays in place and replaces each leaf's state with the new state
its rule returns.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Iterator

import numpy as np

from ..autograd import no_grad
from ..backend import is_array
from ..tree import bottom_up, children, expand, is_leaf, named_leaves, walk_named
from .rule import GlobalRule, OptimiserChain, Rule, naming_group, stages
from ..tensor import unwrap

__all__ = ["Leaf", "StateNode", "adjust", "freeze", "named_state_leaves", "setup", "thaw", "update"]


class Leaf:
    """The optimiser's record for one parameter: ``rule``, ``state`` and ``frozen``.

    >>> import numpy as np, minflux as mf
    >>> mf.optim.setup(mf.optim.Momentum(), np.zeros(3))
    Leaf(Momentum(lr=0.01, rho=0.9), state float64[3])
    """

    def __init__(self, rule: Rule, state: Any, frozen: bool = False):
        self.rule, self.state, self.frozen = rule, state, frozen

    def __repr__(self) -> str:
        return f"Leaf({self.rule}, state {_state_text(self.state)}{', frozen' if self.frozen else ''})"


def _state_text(state) -> str:
    if is_array(state):
        return f"{np.dtype(state.dtype).name}[{', '.join(str(n) for n in state.shape)}]"
    if isinstance(state, tuple):
        return "(" + ", ".join(_state_text(s) for s in state) + ")"
    return repr(state)


class StateNode:
    """The state of an object of the model: attributes of the same names (only those with parameters).

    Its ``repr`` lists every leaf under its dotted name.

    >>> import numpy as np, minflux as mf
    >>> layer = mf.nn.Dense(2, 1, rng=np.random.default_rng(0))
    >>> state = mf.optim.setup(mf.optim.Descent(0.1), layer)
    >>> state
    StateNode of Dense:
      W: Leaf(Descent(lr=0.1), state ())
      b: Leaf(Descent(lr=0.1), state ())
    >>> state.W.rule
    Descent(lr=0.1)
    """

    def __init__(self, kind: str, **items):
        object.__setattr__(self, "_kind", kind)
        self.__dict__.update(items)

    def __repr__(self) -> str:
        lines = [f"StateNode of {self._kind}:"]
        lines += [f"  {name}: {leaf!r}" for name, leaf in named_state_leaves(self)]
        return "\n".join(lines)


def _state_children(node) -> list[tuple[Any, Any]]:
    if isinstance(node, StateNode):
        return [(k, v) for k, v in vars(node).items() if not k.startswith("_")]
    if isinstance(node, (list, tuple)):
        return [(k, v) for k, v in enumerate(node) if v is not None]
    if isinstance(node, dict):
        return list(node.items())
    return []


def named_state_leaves(state: Any, prefix: str = "") -> Iterator[tuple[str, Leaf]]:
    """``(dotted_name, Leaf)`` for every distinct leaf; names match the model's parameter names.

    >>> import numpy as np, minflux as mf
    >>> state = mf.optim.setup(mf.optim.Descent(), {"layers": [{"W": np.ones(2)}]})
    >>> [name for name, _ in mf.optim.named_state_leaves(state)]
    ['layers.0.W']
    """
    return walk_named(state, prefix, lambda node: isinstance(node, Leaf), _state_children)


def setup(rule: Rule, model: Any) -> Any:
    """The optimiser state tree for ``model`` under ``rule`` (warns when it finds no parameters).

    >>> import numpy as np, minflux as mf
    >>> model = mf.nn.Chain(mf.nn.Dense(2, 1, rng=np.random.default_rng(0)))
    >>> state = mf.optim.setup(mf.optim.Adam(), model)
    >>> state.layers[0].W.state[0].shape
    (2, 1)
    """
    if not isinstance(rule, Rule):
        raise TypeError(f"optim.setup(rule, model) needs a rule such as optim.Adam() first, got "
                        f"{type(rule).__name__}")
    _check_dtypes(model)
    memo: dict[int, tuple] = {}  # id -> (object, its state): tied arrays and shared subtrees once

    def visit(x):
        if id(x) in memo:
            return memo[id(x)][1]
        if is_leaf(x):
            value = unwrap(x)
            leaf = Leaf(rule, rule.init(value)) if np.dtype(value.dtype).kind in "fc" else None
            memo[id(x)] = (x, leaf)
            return leaf
        kids = children(x, trainable_only=True)
        if kids is None:
            return None
        memo[id(x)] = (x, None)  # a reference cycle back to x holds no new parameters

        def combine(results):
            built = [(k, b) for (k, _), b in zip(kids, results)]
            memo[id(x)] = (x, _state_node(x, built))
            return memo[id(x)][1]

        return expand([child for _, child in kids], combine)

    state = bottom_up(model, visit)
    if state is None:
        warnings.warn(f"optim.setup found no trainable float arrays in the model (a "
                      f"{type(model).__name__}); nothing will be optimised. Check that parameters are "
                      f"array attributes and that `trainable` does not exclude them.", UserWarning,
                      stacklevel=2)
        return StateNode(type(model).__name__)
    return state


SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))  # what the rules' kernels compute in


def _check_dtypes(model) -> None:
    """Refuse a trainable floating-point array of a dtype the rules cannot update (float16, ...),
    naming it, before any state is made."""
    for name, array in named_leaves(model, trainable_only=True):
        dtype = np.dtype(unwrap(array).dtype)
        if dtype.kind == "f" and dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"optim.setup: parameter {name or '<root>'} is {dtype.name}; optimiser rules "
                            f"update float32 and float64 arrays (convert it, e.g. with .astype(np.float32))")


def _state_node(x, built: list):
    """The state of container ``x`` from its children's states ``built`` (None: no parameters)."""
    if all(b is None for _, b in built):
        return None
    if isinstance(x, (list, tuple)):
        return type(x)(b for _, b in built) if not hasattr(x, "_fields") else tuple(b for _, b in built)
    if isinstance(x, dict):
        return {k: b for k, b in built if b is not None}
    return StateNode(type(x).__name__, **{k: b for k, b in built if b is not None})


def _child(x, key, path: str, what: str):
    try:
        if isinstance(x, (list, tuple, dict)):
            return x[key]
        return getattr(x, key)
    except (AttributeError, KeyError, IndexError, TypeError):
        hint = ""
        if what == "grads" and isinstance(x, tuple) and not isinstance(key, int):
            hint = (" (mf.gradient returns one gradient per argument: pass the model's, e.g. "
                    "grads[0])")
        raise ValueError(f"optim.update: the {what} have no entry {key!r} at "
                         f"{path or '<root>'}{hint}; the state tree was built by optim.setup for a "
                         f"model of another structure") from None


def _collect(state, model, grads) -> list:
    items, seen = [], {}  # seen: id -> state node, so each leaf and each shared subtree is visited once
    stack = [iter([(state, model, grads, "")])]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        node, m, g, path = entry
        if id(node) in seen:
            continue
        seen[id(node)] = node
        if isinstance(node, Leaf):
            if not is_array(m):
                raise TypeError(f"optim.update: the model holds a {type(m).__name__} at "
                                f"{path or '<root>'} where the state expects an array")
            if g is not None:
                g = unwrap(g)
                if tuple(g.shape) != tuple(m.shape):
                    raise ValueError(f"optim.update: gradient of {path or '<root>'} has shape "
                                     f"{tuple(g.shape)}, the parameter {tuple(m.shape)}")
            items.append((node, m, g, path or "<root>"))
            continue
        stack.append(_below(node, m, g, path))
    return items


def _below(node, m, g, path: str):
    for key, sub in _state_children(node):
        name = f"{path}.{key}" if path else str(key)
        yield sub, _child(m, key, path, "model"), None if g is None else _child(g, key, path, "grads"), name


def update(state: Any, model: Any, grads: Any) -> None:
    """Update every non-frozen parameter of ``model`` in place from ``grads``, and the state with it.

    ``grads`` has the model's structure (what `mf.gradient` returns for the model); parameters whose
    gradient is None are left alone. Rules run stage by stage, so a `ClipNorm` in a chain sees the
    gradients of all parameters at its position.

    >>> import numpy as np, minflux as mf
    >>> model = {"w": np.array([1.0, 2.0])}
    >>> state = mf.optim.setup(mf.optim.Descent(0.5), model)
    >>> mf.optim.update(state, model, {"w": np.array([2.0, 2.0])})
    >>> model["w"]
    array([0., 1.])
    """
    items = [(leaf, p, g, name) for leaf, p, g, name in _collect(state, model, grads)
             if g is not None and not leaf.frozen]
    if not items:
        return
    with no_grad():
        pipelines = [stages(leaf.rule) for leaf, _, _, _ in items]
        states = [list(leaf.state) if isinstance(leaf.rule, OptimiserChain) else [leaf.state]
                  for leaf, _, _, _ in items]
        deltas = [g for _, _, g, _ in items]
        params = [p for _, p, _, _ in items]
        for stage in range(max(len(p) for p in pipelines)):
            groups: dict[Rule, list[int]] = {}
            for i, pipeline in enumerate(pipelines):
                if stage >= len(pipeline):
                    continue
                rule = pipeline[stage]
                if isinstance(rule, GlobalRule):
                    groups.setdefault(rule, []).append(i)
                else:
                    states[i][stage], deltas[i] = rule.apply(states[i][stage], params[i], deltas[i])
            for rule, members in groups.items():
                with naming_group([items[i][3] for i in members]):
                    new_states, new_deltas = rule.apply_all([states[i][stage] for i in members],
                                                            [params[i] for i in members],
                                                            [deltas[i] for i in members])
                for i, s, d in zip(members, new_states, new_deltas):
                    states[i][stage], deltas[i] = s, d
        for (leaf, param, _, _), s, delta in zip(items, states, deltas):
            param -= delta
            leaf.state = tuple(s) if isinstance(leaf.rule, OptimiserChain) else s[0]


def _adjusted(rule: Rule, changes: dict, used: set) -> Rule:
    if isinstance(rule, OptimiserChain):
        return OptimiserChain(tuple(_adjusted(r, changes, used) for r in rule.rules))
    names = {f.name for f in dataclasses.fields(rule)}
    mine = {k: v for k, v in changes.items() if k in names}
    used.update(mine)
    return dataclasses.replace(rule, **mine) if mine else rule


def adjust(state: Any, **changes) -> None:
    """Change hyperparameters (e.g. ``lr=1e-4``) of every leaf under ``state`` (a whole tree or a branch).

    In a chain every member with that field changes. A name that no rule has is an error.

    >>> import numpy as np, minflux as mf
    >>> model = {"enc": np.ones(1), "dec": np.ones(1)}
    >>> state = mf.optim.setup(mf.optim.Adam(lr=1e-3), model)
    >>> mf.optim.adjust(state["dec"], lr=1e-4)
    >>> state["enc"].rule.lr, state["dec"].rule.lr
    (0.001, 0.0001)
    """
    leaves = [leaf for _, leaf in named_state_leaves(state)]
    used: set = set()
    new_rules = [_adjusted(leaf.rule, changes, used) for leaf in leaves]
    unknown = sorted(set(changes) - used)
    if unknown and leaves:
        known = sorted({k for leaf in leaves for k in _field_names(leaf.rule)})
        raise ValueError(f"optim.adjust: no rule in this state has {', '.join(unknown)}; the rules' "
                         f"hyperparameters are {', '.join(known)}")
    for leaf, rule in zip(leaves, new_rules):
        leaf.rule = rule


def _field_names(rule: Rule) -> list[str]:
    return [f.name for member in stages(rule) for f in dataclasses.fields(member)]


def freeze(state: Any) -> None:
    """Stop updating every parameter under ``state`` (a whole tree or a branch) until `thaw`.

    >>> import numpy as np, minflux as mf
    >>> model = {"a": np.ones(1), "b": np.ones(1)}
    >>> state = mf.optim.setup(mf.optim.Descent(1.0), model)
    >>> mf.optim.freeze(state["a"])
    >>> mf.optim.update(state, model, {"a": np.ones(1), "b": np.ones(1)}); model
    {'a': array([1.]), 'b': array([0.])}
    """
    for _, leaf in named_state_leaves(state):
        leaf.frozen = True


def thaw(state: Any) -> None:
    """Undo `freeze` for every parameter under ``state``.

    >>> import numpy as np, minflux as mf
    >>> state = mf.optim.setup(mf.optim.Descent(), np.ones(1))
    >>> mf.optim.freeze(state); mf.optim.thaw(state); state.frozen
    False
    """
    for _, leaf in named_state_leaves(state):
        leaf.frozen = False
