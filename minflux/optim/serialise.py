"""Optimisation rules as JSON and back, for checkpoints: the type and the hyperparameters of each rule.

A chain is ``{"type": "OptimiserChain", "rules": [...]}``; any other rule is ``{"type": <class name>,
<field>: <value>, ...}``. Reading one back needs the rule it replaces (the object the program built):
the file supplies the hyperparameters, the program the classes, so no code is named by the file.
"""
from __future__ import annotations

import dataclasses

from .rule import OptimiserChain, Rule, hyperparameters

__all__ = ["restored_rule", "rule_mismatches", "rule_to_json"]


def rule_to_json(rule: Rule) -> dict:
    """The JSON-able description of ``rule``.

    >>> import minflux as mf
    >>> rule_to_json(mf.optim.chain(mf.optim.ClipValue(2.0), mf.optim.Descent(0.1)))
    {'type': 'OptimiserChain', 'rules': [{'type': 'ClipValue', 'limit': 2.0}, {'type': 'Descent', 'lr': 0.1}]}
    """
    if isinstance(rule, OptimiserChain):
        return {"type": "OptimiserChain", "rules": [rule_to_json(r) for r in rule.rules]}
    return {"type": type(rule).__name__, **hyperparameters(rule)}


def rule_mismatches(name: str, rule: Rule, saved: dict) -> list[str]:
    """Why ``saved`` cannot be read back into ``rule`` (the parameter ``name``'s); empty when it can.

    >>> import minflux as mf
    >>> rule_mismatches("w", mf.optim.Adam(), {"type": "Descent", "lr": 0.1})
    ['optimiser rule of w: the checkpoint has Descent, the target Adam']
    """
    if type(rule).__name__ != saved.get("type"):
        return [f"optimiser rule of {name}: the checkpoint has {saved.get('type')}, the target "
                f"{type(rule).__name__}"]
    if isinstance(rule, OptimiserChain):
        if len(rule.rules) != len(saved["rules"]):
            return [f"optimiser rule of {name}: the checkpoint's chain has {len(saved['rules'])} rules, "
                    f"the target's {len(rule.rules)}"]
        return [problem for r, s in zip(rule.rules, saved["rules"])
                for problem in rule_mismatches(name, r, s)]
    extra = sorted(set(saved) - {f.name for f in dataclasses.fields(rule)} - {"type"})
    if extra:
        return [f"optimiser rule of {name}: the checkpoint's {saved['type']} has hyperparameters {extra} "
                f"that this version does not know"]
    return []


def restored_rule(rule: Rule, saved: dict) -> Rule:
    """``rule`` with the hyperparameters of ``saved`` (which `rule_mismatches` accepted).

    >>> import minflux as mf
    >>> restored_rule(mf.optim.Adam(lr=0.1), {"type": "Adam", "lr": 0.001}).lr
    0.001
    """
    if isinstance(rule, OptimiserChain):
        return OptimiserChain(tuple(restored_rule(r, s) for r, s in zip(rule.rules, saved["rules"])))
    return dataclasses.replace(rule, **{k: v for k, v in saved.items() if k != "type"})
