"""What a native command writes lies where its accesses say it writes (`native_groups.accesses`).

The commands of a segment that run at once are chosen by what each reads and writes, taken at the
probe from the arrays of its call: a command with a check to redo writes its ``out``, any other
writes its results and what it holds, and only reads the rest of its call's arrays. Here every
command of a model's native replay runs alone on the memory of that replay, and no byte outside
what it is said to write may change: a command that wrote into an argument it does not return
would be run beside a command reading that argument.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import minflux as mf
from minflux.schedule import native, native_groups, native_results
from tests.compiled.test_models_compiled import build, train_step
from tests.compiled.test_native_replay import compile_after_five_replays  # noqa: F401


def native_build_of(case: str, monkeypatch) -> dict:
    """The probe, the commands' words and the memory of the first native form of ``case``'s step."""
    found: dict = {}
    make_segments = native.NativeForm._segments

    def segments(self, statements, natives, *rest):
        found["natives"] = natives
        return make_segments(self, statements, natives, *rest)

    make_form = native.NativeForm.__init__

    def form(self, statements, planned, probe, arena, inputs, outputs):
        make_form(self, statements, planned, probe, arena, inputs, outputs)
        if "form" not in found:
            found.update(form=self, probe=probe, arena=arena, inputs=list(inputs))   # kept alive

    monkeypatch.setattr(native.NativeForm, "_segments", segments)
    monkeypatch.setattr(native.NativeForm, "__init__", form)
    model, opt_state, carry, loss_fn, batches = build(case)
    step = mf.compile(train_step)
    for x, y in batches[:8]:
        _, carry = step(model, opt_state, carry, x, y, loss_fn)
    assert "form" in found, "no native form was built"
    return found


def memory(arrays) -> list:
    """The distinct (low, high) byte ranges of ``arrays``, each as a writable uint8 array over it."""
    ranges = sorted({native_groups._bounds(a) for a in arrays if a.__class__ is np.ndarray and a.size})
    return [(low, np.ctypeslib.as_array((ctypes.c_uint8 * (high - low)).from_address(low)))
            for low, high in ranges]


@pytest.mark.parametrize("case", ["hmlstm-branch-ln", pytest.param("hmlstm-blend-plain", marks=pytest.mark.slow),
                                  pytest.param("lstm-cell", marks=pytest.mark.slow), "dense-chain", "gated"])
def test_every_command_writes_only_where_its_accesses_say(case, monkeypatch):
    found = native_build_of(case, monkeypatch)
    form, probe = found["form"], found["probe"]
    made = [native_results._result_arrays(probe.commands[index][1])[k] for index, k in form.new_results]
    assert form.patch(found["inputs"], made)   # the probe's memory again
    watched = [found["arena"], *found["inputs"]]
    for command, arguments, results in probe.made_of.values():
        watched += [*arguments, *results, *command.held]
    regions = memory(watched)
    checked = 0
    for index, (first, end, _) in found["natives"].items():
        spans = native_groups.accesses(*probe.made_of[index])
        if spans is None:     # said to share memory with everything
            continue
        written = [(low, high) for low, high, w in spans if w]
        before = [r.copy() for _, r in regions]
        form._run(first, end, 0, 0, 0, form.program.ctypes.data)
        form.program[0] = -1
        for (low, r), old in zip(regions, before):
            for at in (low + np.flatnonzero(r != old)).tolist():
                assert any(a <= at < b for a, b in written), \
                    f"{case}: command {index} ({form.program[first]}) wrote outside what it says it writes"
            r[...] = old
        checked += 1
    assert checked > 0.9 * len(found["natives"])
