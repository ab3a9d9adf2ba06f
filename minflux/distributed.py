"""Synchronous data parallelism on MPI: ranks, broadcasts and the gradient allreduce.

Start ``N`` processes with an MPI launcher (``mpiexec -n N python train.py``); each calls `init`,
computes the gradient of its own share of the batch, averages it with `allreduce_tree`, and takes the
same optimiser step. Parameters start equal (`broadcast_tree`) and stay equal, because every rank
applies the same averaged gradient to the same parameters.

Without a launcher (or without mpi4py) everything works unchanged as one process of one rank, so a
script written for several ranks runs as it is on a laptop. MPI comes from the ``mpi`` extra
(``pip install 'minflux[mpi]'``: mpi4py and MPICH from the package index).

How gradients move. The distinct array leaves of the tree are packed, per dtype, into one flat
buffer, which is reduced in buckets of at most ``bucket_bytes`` (16 MiB by default) rather than one
call per array. Each bucket is a reduce-scatter followed by an all-gather: every slice of the sum is
computed by exactly one rank and then copied to the others, so all ranks hold bit-identical results by
construction, and the MPI (or NCCL) algorithm for a fixed number of ranks is deterministic, so a rerun
is bit-identical too. The volume per rank is ``2 (N - 1) / N`` times the gradient's bytes, the
bandwidth-optimal amount. CuPy gradients are reduced on the device with NCCL
(``cupy.cuda.nccl``); MPI only carries the NCCL id.

No collective waits forever: each runs under a watchdog that aborts the whole job with a message
naming the collective when it has not finished within ``timeout`` seconds (``MINFLUX_COLLECTIVE_TIMEOUT``,
default 600), and a rank that dies is noticed by the launcher, which ends the others.

With several ranks on one machine, `init` gives each rank an equal share of the cores for its kernels
and BLAS (``cores // local ranks``) unless ``MINFLUX_NUM_THREADS`` is set.

>>> from minflux import distributed
>>> distributed.init()
>>> distributed.rank(), distributed.size(), distributed.is_main()
(0, 1, True)
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import backend
from . import _flat_buffers as _flat
from . import tree as _tree
from .runtime.threads import set_num_threads, usable_cores
from .runtime import settings
from .schedule import operation
from .tensor import unwrap

__all__ = ["abort", "allreduce_tree", "barrier", "broadcast_object", "broadcast_tree", "gather_rows",
           "init", "is_main", "rank", "size"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 600.0
DEFAULT_BUCKET_BYTES = 16 * 2**20
ABORT_GRACE_S = 0.5
"""Seconds `abort` waits before ending the job, so that what every rank printed reaches the launcher."""
OPS = ("mean", "sum", "max", "min")
# set by MPI launchers in every process they start (MPICH/Hydra, Intel MPI, Open MPI, PMIx, MVAPICH)
LAUNCHER_VARIABLES = ("PMI_SIZE", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE",
                      "MPI_LOCALNRANKS")


@dataclass
class _World:
    comm: Any = None          # mpi4py's COMM_WORLD, or None for one process
    rank: int = 0
    size: int = 1
    local_size: int = 1
    local_rank: int = 0
    timeout: float | None = DEFAULT_TIMEOUT
    nccl: Any = None          # the NCCL communicator, made on the first CuPy allreduce


_world: _World | None = None


def _launched_by_mpi() -> bool:
    return any(v in os.environ for v in LAUNCHER_VARIABLES) or settings.get("mpi")


def _timeout_from_environment() -> float | None:
    return settings.get("collective_timeout")


def init(timeout: float | None | str = "environment") -> None:
    """Join the MPI job this process was started in (or become the only rank of a one-process job).

    Safe to call more than once. ``timeout`` is how many seconds a collective may take before the
    job is aborted (None: wait forever; default ``MINFLUX_COLLECTIVE_TIMEOUT`` or 600). Under an MPI
    launcher without mpi4py installed it raises, naming the extra to install, rather than running N
    unconnected copies of the job.

    >>> from minflux import distributed
    >>> distributed.init(); distributed.size()
    1
    """
    global _world
    seconds = _timeout_from_environment() if timeout == "environment" else timeout
    if _world is not None:
        _world.timeout = seconds
        return
    world = _World(timeout=seconds)
    if _launched_by_mpi():
        try:
            from mpi4py import MPI
        except ImportError:
            launched = os.environ.get("PMI_SIZE") or os.environ.get("OMPI_COMM_WORLD_SIZE") or "several"
            raise RuntimeError(f"this process was started by an MPI launcher ({launched} processes) but "
                               "mpi4py is not installed; install it with pip install 'minflux[mpi]' "
                               "(mpi4py and MPICH)") from None
        comm = MPI.COMM_WORLD
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        world = _World(comm, comm.Get_rank(), comm.Get_size(), local.Get_size(), local.Get_rank(), seconds)
        local.Free()
    _world = world
    if world.size > 1:
        _share_cores(world)
        _pick_gpu(world)
        log.info("rank %d of %d (%d on this machine)", world.rank, world.size, world.local_size)


def _share_cores(world: _World) -> None:
    if settings.chosen("num_threads"):
        return
    set_num_threads(max(1, usable_cores() // world.local_size))


def _pick_gpu(world: _World) -> None:
    cupy = backend.cupy_module()
    if cupy is not None and backend.gpu_available():
        cupy.cuda.Device(world.local_rank % cupy.cuda.runtime.getDeviceCount()).use()


def _get() -> _World:
    if _world is None:
        init()
    return _world


def rank() -> int:
    """This process's rank, 0 .. size() - 1.

    >>> from minflux import distributed
    >>> distributed.rank()
    0
    """
    return _get().rank


def size() -> int:
    """The number of ranks in the job (1 without an MPI launcher).

    >>> from minflux import distributed
    >>> distributed.size()
    1
    """
    return _get().size


def is_main() -> bool:
    """True on rank 0, the rank that writes files and logs.

    >>> from minflux import distributed
    >>> distributed.is_main()
    True
    """
    return _get().rank == 0


# -- the watchdog ---------------------------------------------------------------------------------

class _Watchdog:
    """One daemon thread that aborts the job when the collective it guards outlives its deadline."""

    def __init__(self):
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what, self._timeout = "", 0.0
        self._thread: threading.Thread | None = None

    @contextlib.contextmanager
    def guard(self, world: _World, what: str, timeout: float | None):
        if world.size == 1 or timeout is None:
            yield
            return
        with self._cond:
            self._deadline, self._what, self._timeout = time.monotonic() + timeout, what, timeout
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, args=(world,),
                                                name="minflux-collective-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                self._deadline = None
                self._cond.notify()

    def _watch(self, world: _World) -> None:
        with self._cond:
            while True:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                _abort_from_watchdog(world, self._what, self._timeout)


_watchdog = _Watchdog()


def _abort_from_watchdog(world: _World, what: str, timeout: float) -> None:
    message = (f"minflux.distributed: rank {world.rank} of {world.size}: {what} did not finish within "
               f"{timeout:g} s; another rank has died, hangs, or is far behind. Aborting the whole job. "
               "(If steps legitimately take longer, raise MINFLUX_COLLECTIVE_TIMEOUT.)")
    log.critical(message)  # without handlers, logging's last resort prints it on stderr
    _abort(world, 1)


def _abort(world: _World, code: int) -> None:
    from mpi4py import MPI

    sys.stdout.flush()
    sys.stderr.flush()
    time.sleep(ABORT_GRACE_S)  # the launcher forwards what this rank printed before it ends the job

    if MPI.Query_thread() == MPI.THREAD_MULTIPLE:
        world.comm.Abort(code)
    os._exit(code)  # the launcher sees a rank exit without finalising and ends the others


def abort(code: int = 1) -> None:
    """End every rank of the job now with exit status ``code`` (with one rank: `sys.exit`).

    For an error on one rank that the others cannot know about: without it they would wait in
    their next collective until the watchdog's timeout.

    >>> from minflux import distributed
    >>> try:
    ...     distributed.abort(3)
    ... except SystemExit as e:
    ...     e.code
    3
    """
    world = _get()
    if world.size == 1:
        sys.exit(code)
    _abort(world, code)


def barrier(timeout: float | None | str = "default") -> None:
    """Wait until every rank has arrived (``timeout`` seconds at most; default: `init`'s).

    >>> from minflux import distributed
    >>> distributed.barrier()
    """
    world = _get()
    if world.size == 1:
        return
    with _watchdog.guard(world, "barrier", world.timeout if timeout == "default" else timeout):
        world.comm.Barrier()


def broadcast_object(obj: Any, root: int = 0) -> Any:
    """Rank ``root``'s ``obj`` (any picklable value) on every rank; for small things such as paths.

    >>> from minflux import distributed
    >>> distributed.broadcast_object("runs/ptb-1")
    'runs/ptb-1'
    """
    world = _get()
    if world.size == 1:
        return obj
    with _watchdog.guard(world, "broadcast_object", world.timeout):
        return world.comm.bcast(obj, root=root)


def allreduce_tree(grads: Any, op: str = "mean", bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> Any:
    """``grads`` with every array replaced by its ``op`` (mean, sum, max or min) over all ranks.

    The tree keeps its structure: ``None`` leaves (arrays that got no gradient) and configuration
    stay as they are, tied arrays stay tied; a numpy scalar is configuration too, so reduce a scalar
    loss as an array (``loss[None]``). Arrays are reduced in flat buffers of at most ``bucket_bytes``
    per call; the results are bit-identical on every rank and from run to run. With one rank ``grads``
    is returned unchanged. CuPy arrays are reduced on the device with NCCL. Inside a step compiled
    with `mf.compile` the reduction of each dtype is one recorded operation, which every replay
    performs again on its own arrays.

    >>> import numpy as np
    >>> from minflux import distributed
    >>> distributed.allreduce_tree({"W": np.ones(2, np.float32), "b": None})
    {'W': array([1., 1.], dtype=float32), 'b': None}
    """
    if op not in OPS:
        raise ValueError(f"allreduce_tree: op must be one of {', '.join(OPS)}, got {op!r}")
    world = _get()
    arrays = _flat.array_leaves(grads)
    if world.size == 1 or not arrays:
        return grads
    _flat.array_module(arrays, "allreduce_tree")
    reduced: dict = {}
    for dtype, members in _flat.by_dtype(arrays).items():
        if op == "mean" and dtype.kind not in "fc":
            raise TypeError(f"allreduce_tree: op='mean' needs floating arrays, got {dtype}; use "
                            "op='sum' for counts")
        reduced.update(zip(map(id, members), _reduced(members, op, bucket_bytes)))
    return _tree.map_arrays(lambda a: reduced[id(a)], grads)


@operation
def _reduced(members: list, op: str, bucket_bytes: int) -> list:
    """The ``op`` over all ranks of each array of ``members`` (one dtype), moved as one flat buffer.

    One operation of a recorded step (`mf.compile`): a replay reduces the arrays of its own call,
    so a data-parallel step replays like a one-process step."""
    world = _get()
    xp = _flat.array_module(members, "allreduce_tree")
    dtype = np.dtype(unwrap(members[0]).dtype)
    flat = _flat.pack(xp, members, dtype, world.size)
    step = _flat.bucket_elements(bucket_bytes, dtype.itemsize, world.size)
    with _watchdog.guard(world, f"allreduce_tree (op={op})", world.timeout):
        if xp is np:
            _mpi_reduce(world, flat, op, step)
        else:
            _nccl_reduce(world, flat, op, step, xp)
    parts = _flat.unpack(flat, members)
    return [parts[id(a)] for a in members]


def _mpi_reduce(world: _World, flat: np.ndarray, op: str, step: int) -> None:
    from mpi4py import MPI

    mpi_op = {"mean": MPI.SUM, "sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
    for start in range(0, flat.size, step):
        chunk = flat[start:start + step]
        part = np.empty(chunk.size // world.size, flat.dtype)
        world.comm.Reduce_scatter_block(chunk, part, op=mpi_op)
        if op == "mean":
            part /= world.size
        world.comm.Allgather(part, chunk)


def _nccl_types(nccl, dtype):
    names = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
             "int32": "NCCL_INT32", "int64": "NCCL_INT64", "uint8": "NCCL_UINT8"}
    if dtype.name not in names:
        raise TypeError(f"allreduce_tree: NCCL cannot reduce {dtype} arrays")
    return getattr(nccl, names[dtype.name])


def _nccl_communicator(world: _World, cupy):
    if world.nccl is None:
        nccl = cupy.cuda.nccl
        uid = nccl.get_unique_id() if world.rank == 0 else None
        uid = world.comm.bcast(uid, root=0)
        world.nccl = nccl.NcclCommunicator(world.size, uid, world.rank)
    return world.nccl


def _nccl_reduce(world: _World, flat, op: str, step: int, cupy) -> None:
    nccl = cupy.cuda.nccl
    comm = _nccl_communicator(world, cupy)
    code = _nccl_types(nccl, flat.dtype)
    nccl_op = {"mean": nccl.NCCL_SUM, "sum": nccl.NCCL_SUM, "max": nccl.NCCL_MAX, "min": nccl.NCCL_MIN}[op]
    stream = cupy.cuda.get_current_stream()
    for start in range(0, flat.size, step):
        chunk = flat[start:start + step]
        part = cupy.empty(chunk.size // world.size, flat.dtype)
        comm.reduceScatter(chunk.data.ptr, part.data.ptr, part.size, code, nccl_op, stream.ptr)
        if op == "mean":
            part /= world.size
        comm.allGather(part.data.ptr, chunk.data.ptr, part.size, code, stream.ptr)
    stream.synchronize()  # inside the watchdog's guard: a dead peer shows up here


def _signature(tree: Any) -> list:
    return [(name, tuple(unwrap(a).shape), np.dtype(unwrap(a).dtype).str)
            for name, a in _tree.named_leaves(tree, trainable_only=False)]


def broadcast_tree(tree: Any, root: int = 0, bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> Any:
    """Rank ``root``'s arrays on every rank: ``tree`` with each array replaced by root's copy.

    Use it at the start so that parameters, optimiser state and anything drawn from a random
    generator are identical everywhere. Every rank must pass a tree of the same structure (names,
    shapes and dtypes are checked; a mismatch is a ValueError on every rank naming the first
    difference). Root gets
    its own tree back; with one rank the tree is returned unchanged.

    >>> import numpy as np
    >>> from minflux import distributed
    >>> distributed.broadcast_tree({"W": np.arange(3.0)})
    {'W': array([0., 1., 2.])}
    """
    world = _get()
    arrays = _flat.array_leaves(tree)
    if world.size == 1 or not arrays:
        return tree
    xp = _flat.array_module(arrays, "broadcast_tree")
    mine = _signature(tree)
    with _watchdog.guard(world, "broadcast_tree", world.timeout):
        theirs = world.comm.bcast(mine if world.rank == root else None, root=root)
        difference = None
        if theirs != mine:
            difference = next((f"{a} on rank {world.rank}, {b} on rank {root}"
                               for a, b in zip(mine, theirs) if a != b),
                              f"{len(mine)} arrays on rank {world.rank}, {len(theirs)} on rank {root}")
        differences = [d for d in world.comm.allgather(difference) if d is not None]
        if differences:  # raised on every rank, so none is left waiting for the others
            raise ValueError(f"broadcast_tree: {len(differences)} rank(s) hold a tree that differs from "
                             f"rank {root}'s (first: {differences[0]}); every rank must build the same "
                             "model and state")
        received: dict = {}
        for dtype, members in _flat.by_dtype(arrays).items():
            flat = _flat.pack(xp, members, dtype, 1)
            step = _flat.bucket_elements(bucket_bytes, dtype.itemsize, 1)
            for start in range(0, flat.size, step):
                chunk = flat[start:start + step]
                if xp is np:
                    world.comm.Bcast(chunk, root=root)
                else:
                    _nccl_communicator(world, xp).bcast(chunk.data.ptr, chunk.size,
                                                        _nccl_types(xp.cuda.nccl, dtype), root,
                                                        xp.cuda.get_current_stream().ptr)
            if xp is not np:
                xp.cuda.get_current_stream().synchronize()
            received.update(_flat.unpack(flat, members))
    if world.rank == root:
        return tree
    return _tree.map_arrays(lambda a: received[id(a)], tree)


def gather_rows(tree: Any, root: int = 0) -> Any:
    """On ``root``: ``tree`` with each array replaced by the concatenation, along axis 0 and in rank
    order, of that array on every rank (numpy arrays); None on the other ranks.

    For per-row state split across ranks, such as a recurrent state whose batch rows each rank
    holds a block of. With one rank the tree is returned unchanged.

    >>> import numpy as np
    >>> from minflux import distributed
    >>> distributed.gather_rows([np.zeros((2, 3))])[0].shape
    (2, 3)
    """
    world = _get()
    arrays = _flat.array_leaves(tree)
    if world.size == 1 or not arrays:
        return tree
    mine = [backend.to_numpy(unwrap(a)) for a in arrays]
    with _watchdog.guard(world, "gather_rows", world.timeout):
        parts = world.comm.gather(mine, root=root)
    if world.rank != root:
        return None
    joined = {id(a): np.concatenate([p[k] for p in parts], axis=0) for k, a in enumerate(arrays)}
    return _tree.map_arrays(lambda a: joined[id(a)], tree)
