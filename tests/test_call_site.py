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


def test_a_call_the_interpreter_has_specialised_still_resolves():
    """After a few runs the interpreter rewrites a call in place (3.11: PRECALL makes the call)."""
    for _ in range(50):
        assert seen_by(lambda p: float(p)) is float
        assert seen_by(lambda p: math.exp(p)) is math.exp
        assert seen_by(lambda p: np.float64(p)) is np.float64
        assert seen_by(lambda p: math.isclose(p, 1.0, rel_tol=0.5)) is math.isclose
        assert seen_by(lambda p: "%f" % p) is UNKNOWN


def test_the_call_is_found_among_nested_calls_in_its_arguments():
    assert seen_by(lambda p: max(float(p), abs(-1.0))) is float
    assert seen_by(lambda p: math.hypot(abs(-1.0), float(p), len([1]))) is float
    assert seen_by(lambda p: list(map(float, [p]))) is list
    assert seen_by(lambda p: [float(v) for v in [p]]) is float


def test_what_the_bytecode_does_not_say_plainly_is_unknown():
    functions = {"f": float}
    assert seen_by(lambda p: "%f" % p) is UNKNOWN
    assert seen_by(lambda p: functions["f"](p)) is UNKNOWN
    assert seen_by(lambda p: (FLAG and float or math.exp)(p)) is UNKNOWN  # two paths meet before the call
    assert seen_by(lambda p: (p, float)[1](p)) is UNKNOWN
    assert seen_by(lambda p: float(*[p])) is UNKNOWN


FLAG = True


def test_a_conditional_callee_is_unknown_or_the_branch_taken():
    """Up to 3.12 the branches meet before the call or after the function's NULL slot (unknown); 3.13
    copies the whole call into each branch, whose straight-line code then names its own function.
    Never the other branch's function."""
    for flag, taken in [(True, float), (False, math.exp)]:
        assert seen_by(lambda p: (float if flag else math.exp)(p)) in (UNKNOWN, taken)
        assert seen_by(lambda p: float(p) if flag else math.exp(p)) is taken


def call_after_rebinding(p):
    f = math.hypot
    return f(p, len([f := float]))  # the call is math.hypot, though f is float by the time it runs


def test_a_name_its_arguments_rebind_is_unknown():
    assert seen_by(call_after_rebinding) is UNKNOWN


CHECKED_ON = {(3, 11), (3, 12), (3, 13)}  # Pythons whose bytecode these tests have been run on (.ci/run)


def test_the_reader_has_been_checked_on_this_python():
    """A new Python release changes the bytecode: run these tests on it and add it here (and to
    .ci/run) once they pass, or change the reader until they do."""
    assert sys.version_info[:2] in CHECKED_ON, (
        f"minflux/_call_site.py has not been checked on Python {sys.version_info[0]}.{sys.version_info[1]}")
