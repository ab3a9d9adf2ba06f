"""called_function: the function a frame is calling, read from its bytecode, or UNKNOWN."""
from __future__ import annotations

import builtins
import math
import sys

import numpy as np

from minflux._call_site import UNKNOWN, called_function


class Probe:
    """Records, on conversion to float, what the converting frame was calling."""

    def __init__(self):
        self.seen = []

    def __float__(self):
        self.seen.append(called_function(sys._getframe(1)))
        return 1.0


def seen_by(convert):
    probe = Probe()
    convert(probe)
    return probe.seen[0]


def test_names_module_attributes_and_local_aliases_resolve():
    alias = float
    assert seen_by(lambda p: float(p)) is float
    assert seen_by(lambda p: builtins.float(p)) is float
    assert seen_by(lambda p: alias(p)) is float
    assert seen_by(lambda p: math.exp(p)) is math.exp
    assert seen_by(lambda p: np.float64(p)) is np.float64
    assert seen_by(lambda p: math.isclose(p, 1.0, rel_tol=0.5)) is math.isclose


def test_the_call_is_found_among_nested_calls_in_its_arguments():
    assert seen_by(lambda p: max(float(p), abs(-1.0))) is float
    assert seen_by(lambda p: math.hypot(abs(-1.0), float(p), len([1]))) is float
    assert seen_by(lambda p: list(map(float, [p]))) is list
    assert seen_by(lambda p: [float(v) for v in [p]]) is float


def test_what_the_bytecode_does_not_say_plainly_is_unknown():
    functions = {"f": float}
    assert seen_by(lambda p: "%f" % p) is UNKNOWN
    assert seen_by(lambda p: functions["f"](p)) is UNKNOWN
    assert seen_by(lambda p: (float if p else int)(p)) is UNKNOWN
