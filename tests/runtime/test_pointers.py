"""The addresses handed to kernels are the arrays' own, read the fast way or the slow one."""
from __future__ import annotations

import numpy as np
import pytest

from minflux.runtime import pointers as module


class Marked(np.ndarray):
    pass


ARRAYS = {
    "contiguous": lambda: np.arange(12.0),
    "offset view": lambda: np.arange(12.0)[5:],
    "transposed": lambda: np.zeros((3, 4), np.float32).T,
    "strided": lambda: np.arange(40, dtype=np.int64).reshape(8, 5)[1::2, 3:],
    "reversed": lambda: np.arange(6.0)[::-1],
    "broadcast": lambda: np.broadcast_to(np.arange(3.0), (4, 3)),
    "zero-d": lambda: np.array(2.5),
    "empty": lambda: np.empty((0, 3)),
    "subclass": lambda: np.arange(4.0).view(Marked),
    "bool": lambda: np.ones(7, bool)[2:],
}


@pytest.mark.parametrize("read", [module._read_in_place, module._read_through_ctypes])
def test_each_address_is_what_numpy_reports(read):
    arrays = [make() for make in ARRAYS.values()]
    assert read(arrays) == [a.__array_interface__["data"][0] for a in arrays]


def test_the_fast_read_is_the_one_in_use_on_this_python():
    assert module._layout_holds() and module.pointers is module._read_in_place
