"""Where the addresses of a replay's native commands lie: in memory that stays put, or in an input.

Memory that stays put is the replay's buffer arena and the arrays its statements hold as constants;
an address there is kept as it is. An address in exactly one of the replay's input arrays is kept as
an offset into it, to be written from each call's inputs (`minflux.schedule.native`).

>>> import numpy as np
>>> arena, x = np.zeros(8), np.zeros(4)
>>> places = Places(arena, [x], [], [])
>>> places.locate(arena.ctypes.data + 8), places.locate(x.ctypes.data + 16)
('fixed', (0, 16))
"""
from __future__ import annotations

import bisect

import numpy as np

from ..runtime.pointers import pointers

__all__ = ["Places"]


class Places:
    """Where an address lies: in memory that stays put (the arena, an array the statements or the
    commands hold: ``held`` may hold other objects too), or at an offset into exactly one input."""

    def __init__(self, arena: np.ndarray, inputs: list, statements: list, held: list):
        held = [arena, *(h for h in held if h.__class__ is np.ndarray),
                *(p for st in statements for p in st.params if p.__class__ is np.ndarray)]
        spans = sorted((p, p + a.nbytes) for a, p in zip(held, pointers(held)) if a.nbytes)
        self.fixed = []   # sorted, disjoint (low, high)
        for low, high in spans:
            if self.fixed and low <= self.fixed[-1][1]:
                self.fixed[-1] = (self.fixed[-1][0], max(high, self.fixed[-1][1]))
            else:
                self.fixed.append((low, high))
        self.lows = [low for low, _ in self.fixed]
        arrays = [(i, a) for i, a in enumerate(inputs) if a.__class__ is np.ndarray and a.nbytes]
        self.inputs = [(i, p, p + a.nbytes) for (i, a), p in zip(arrays, pointers([a for _, a in arrays]))]

    def locate(self, address: int):
        """"fixed" for an address in memory that stays put, (input, offset) for one in exactly one
        input, else None."""
        k = bisect.bisect_right(self.lows, address) - 1
        if k >= 0 and address < self.fixed[k][1]:
            return "fixed"
        found = [(i, address - low) for i, low, high in self.inputs if low <= address < high]
        return found[0] if len(found) == 1 else None

    def holder(self, low: int, high: int):
        """"fixed" where the bytes ``low:high`` lie in memory that stays put, the index of the input
        where they lie in exactly one input, else None."""
        k = bisect.bisect_right(self.lows, low) - 1
        if k >= 0 and high <= self.fixed[k][1]:
            return "fixed"
        found = [i for i, start, end in self.inputs if start <= low and high <= end]
        return found[0] if len(found) == 1 else None

    def stays(self, result) -> bool:
        """Whether every array of ``result`` lies in memory that stays put."""
        if result is None:
            return True
        if result.__class__ is list or result.__class__ is tuple:
            return all(self.stays(r) for r in result)
        return result.__class__ is np.ndarray and result.nbytes > 0 and self.locate(pointers([result])[0]) == "fixed"
