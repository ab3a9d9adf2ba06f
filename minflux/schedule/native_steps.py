"""How a native form's statements run its commands: a segment in one walk of the runner, or its
steps (`native_groups.word_steps`) in turn or at once, and what is done where a command's
floating-point check stops the walk (`NativeSteps`, which `native.NativeForm` builds)."""
from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np

from ..runtime.row_pool import run_rows
from ..runtime.split_choice import TRIES, SplitChoice
from ..runtime.threads import threads_now
from . import native_groups

__all__ = ["LEARNING_REPLAYS", "REPLAY_SPLIT_GAIN", "NativeSteps"]

LEARNING_REPLAYS = 2 * TRIES
"""Native replays in which the steps that may run at once learn how (each step's `SplitChoice`),
before whole replays are timed with those steps as chosen against every step in turn."""

REPLAY_SPLIT_GAIN = 0.03
"""How much less time a whole replay must take with its steps run at once (as each chose) than with
every step in turn for it to go on running them at once: running steps at once costs CPU (1.13-1.21x
the CPU time of the wall time for a compiled HM-LSTM step on a 2-core AMD EPYC Zen 3), which a gain
within the noise of a step's time does not repay."""


class NativeSteps:
    """The running half of `native.NativeForm`: ``program`` (its words), ``_address`` (theirs),
    ``_run`` (the runner), ``_redo`` (a checked command's word -> (numpy call, operands, end word,
    error state)), ``_skip`` and ``_at_once`` are set by the form.

    >>> from minflux.schedule.native import NativeForm
    >>> issubclass(NativeForm, NativeSteps), NativeForm.in_groups is NativeSteps.in_groups
    (True, True)
    """

    _at_once = False            # whether any step may run at once
    _in_turn_only = False       # whether this replay runs every step in turn (`replay`)
    _replays = 0
    _whole: SplitChoice | None = None

    def replay(self, fast, python, inputs: list):
        """``fast(inputs)`` (the statements of the native form), or ``python(inputs)`` where `patch`
        refuses this call's inputs. After `LEARNING_REPLAYS`, whole replays with each step run as it
        chose and with every step in turn are timed against each other (a `SplitChoice` with a gain of
        `REPLAY_SPLIT_GAIN`), and the faster way kept: a step's own first calls do not see what running
        it at once costs the steps after it (the data it wrote lie in the other core's cache)."""
        if not self.patch(inputs):
            return python(inputs)
        if not self._at_once or self._replays < LEARNING_REPLAYS:
            self._replays += 1
            return fast(inputs)
        if self._whole is None:
            self._whole = SplitChoice(REPLAY_SPLIT_GAIN)
        return self._whole.run(threads_now(), lambda threads: self._replay_on(threads, fast, inputs))

    def _replay_on(self, threads: int, fast, inputs: list):
        self._in_turn_only = threads < 2
        try:
            return fast(inputs)
        finally:
            self._in_turn_only = False

    def segment(self, first: int, end: int) -> None:
        """Run the commands from word ``first`` to word ``end``; a command whose floating-point check
        failed is done again by numpy, which raises or warns as its error state says."""
        left = self._in_turn([(first, end)])
        while left:
            left = self._in_turn([(self._redone(left[0][0]), end)])

    def _redone(self, stopped: int) -> int:
        """Do the command whose check stopped the walk at word ``stopped`` again by numpy; the word after it."""
        fn, operands, after, errstate = self._redo[stopped]
        *args, out = [_array_at(int(self.program[x.word]), *x[1:]) if x.__class__ is _At else x for x in operands]
        with np.errstate(**errstate):   # the state at its call: the statements setting it may be left out
            fn(*args, out=out)
        return after

    def in_groups(self, steps: list, choices: list) -> None:
        """Run a segment's ``steps`` (`native_groups.word_steps`): the commands of a word range in turn,
        the products of a group (or a product and the commands beside it), a kernel's row shares or a
        product's shares at once on the threads free now, or one after the other where one is free or
        the step's first calls measured that faster (its `SplitChoice` in ``choices``, shared by the
        steps of like commands). Each command is the same call either way. The steps may run a command
        before an earlier one: where a check stops one, every command not run yet runs in turn in
        program order, numpy doing each stopped one again in its place (`_in_order`), so that numpy
        warns and raises as the eager call does."""
        for at, (step, choice) in enumerate(zip(steps, choices)):
            if choice is None:
                left = self._in_turn([step])
            else:
                free = 1 if self._in_turn_only else min(threads_now(), len(step))
                left = choice.run(free, lambda threads, step=step: self._step(step, threads))
            if left:
                self._in_order(left, steps[at + 1:])
                return

    def _in_turn(self, ranges) -> list:
        """Run the commands of word ``ranges`` one after the other; where a check stops one, what is
        left: (first word, end word, whether the walk stopped at its first) of each range."""
        program = self.program
        for k, (first, end) in enumerate(ranges):
            if first == self._skip[0]:   # its call ran in Python (`_refreshed`)
                first, self._skip = self._skip[1], (-1, -1)
            if first < end:
                self._run(first, end, 0, 0, 0, self._address)
                stopped = int(program[0])
                if stopped >= 0:
                    program[0] = -1
                    return [(stopped, end, True), *((f, e, False) for f, e in ranges[k + 1:])]
        return []

    def _in_order(self, left: list, steps: list) -> None:
        """Run what is ``left`` of a step (`_in_turn`) and every command of ``steps`` in program order."""
        for step in steps:
            left += [(first, end, False) for first, end in ([step] if step[0].__class__ is int else _joined(step))]
        for first, end, stopped in sorted(left):
            if stopped:
                first = self._redone(first)
            if first < end:
                self.segment(first, end)

    def _step(self, step: tuple, threads: int) -> list:
        """Run the ranges of ``step`` at once, or in turn on one thread; where a check stopped one, what
        is left (`_in_turn`): a group's products and a product's shares to run again, not the commands
        beside a product, which have no check and ran once."""
        if threads < 2:
            return self._in_turn(_joined(step))
        run_rows(self._run_ranges, 0, len(step), threads, (step,))
        if self.program[0] < 0:
            return []
        self.program[0] = -1
        return [(first, end, False) for first, end in
                _joined([words for words in step if words.__class__ is not native_groups.Beside])]

    def _run_ranges(self, r0: int, r1: int, ranges: tuple) -> None:
        for first, end in ranges[r0:r1]:
            self._run(first, end, 0, 0, 0, self._address)


def _joined(ranges: tuple) -> list:
    """Word ranges with each one that ends where the next begins joined to it.

    >>> _joined(((1, 5), (5, 9), (12, 14)))
    [(1, 9), (12, 14)]
    """
    joined = [ranges[0]]
    for first, end in ranges[1:]:
        if joined[-1][1] == first:
            joined[-1] = (joined[-1][0], end)
        else:
            joined.append((first, end))
    return joined


class _At(NamedTuple):
    """A redo's array: at the address in word ``word`` of the program, laid out so."""

    word: int
    shape: tuple
    strides: tuple
    dtype: np.dtype


def _array_at(address: int, shape: tuple, strides: tuple, dtype) -> np.ndarray:
    extent = sum((n - 1) * s for n, s in zip(shape, strides)) + dtype.itemsize   # strides are not negative
    return np.ndarray(shape, dtype, (ctypes.c_char * extent).from_address(address), 0, strides)
