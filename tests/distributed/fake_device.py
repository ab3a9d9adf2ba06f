"""A stand-in for CuPy and ``cupy.cuda.nccl`` on the host, for the NCCL path of `minflux.distributed`.

`FakeDeviceArray` is a distinct array type (a numpy subclass) whose ``data.ptr`` is its address, as
a CuPy array's is; the fake NCCL communicator reads and writes memory through those pointers and
moves it with MPI, so the code that drives NCCL (the id exchange, pointer and count arithmetic, the
reduce-scatter / all-gather / broadcast calls) runs for real on CPU arrays.
"""
import ctypes
import types

import numpy as np


class FakeDeviceArray(np.ndarray):
    """A "device" array: numpy memory, a CuPy-like ``data.ptr``."""

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.ctypes.data)


NCCL_DTYPES = {0: np.float16, 1: np.float32, 2: np.float64, 3: np.int32, 4: np.int64, 5: np.uint8}


def _memory(ptr: int, count: int, code: int) -> np.ndarray:
    dtype = np.dtype(NCCL_DTYPES[code])
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(ptr)
    return np.frombuffer(buffer, dtype, count)


def fake_nccl():
    from mpi4py import MPI

    module = types.SimpleNamespace(calls=[], uids_seen=[],
                                   NCCL_FLOAT16=0, NCCL_FLOAT32=1, NCCL_FLOAT64=2, NCCL_INT32=3,
                                   NCCL_INT64=4, NCCL_UINT8=5, NCCL_SUM=10, NCCL_MAX=11, NCCL_MIN=12)
    ops = {10: MPI.SUM, 11: MPI.MAX, 12: MPI.MIN}
    comm = MPI.COMM_WORLD

    class NcclCommunicator:
        def __init__(self, ndev, uid, rank):
            assert (ndev, rank) == (comm.size, comm.rank)
            module.uids_seen.append(uid)

        def reduceScatter(self, send, recv, count, code, op, stream):
            module.calls.append("reduceScatter")
            comm.Reduce_scatter_block(_memory(send, count * comm.size, code), _memory(recv, count, code),
                                      op=ops[op])

        def allGather(self, send, recv, count, code, stream):
            module.calls.append("allGather")
            comm.Allgather(_memory(send, count, code), _memory(recv, count * comm.size, code))

        def bcast(self, buff, count, code, root, stream):
            module.calls.append("bcast")
            comm.Bcast(_memory(buff, count, code), root=root)

    module.NcclCommunicator = NcclCommunicator
    module.get_unique_id = lambda: ("nccl-id", 1234)
    return module


def fake_cupy_module(nccl=None):
    """A module that minflux.backend accepts as ``cupy``: arrays, ``cuda.nccl``, streams."""
    stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
    return types.SimpleNamespace(
        __name__="cupy",
        ndarray=FakeDeviceArray,
        asarray=lambda a: np.array(a).view(FakeDeviceArray),
        empty=lambda shape, dtype: np.empty(shape, dtype).view(FakeDeviceArray),
        asnumpy=lambda a: np.array(a),
        cuda=types.SimpleNamespace(nccl=nccl, get_current_stream=lambda: stream,
                                   runtime=types.SimpleNamespace(getDeviceCount=lambda: 0)),
    )


def install_fake_cupy():
    """Make minflux.backend see the fake CuPy (with a fake NCCL driven by MPI); returns it."""
    import minflux.backend as backend

    fake = fake_cupy_module(fake_nccl())
    backend._cupy = fake
    return fake
