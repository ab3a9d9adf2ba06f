"""Ctrl-C stops a long-running kernel with loops between two row chunks, and the process goes on."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import os, signal, sys, threading, time
    import numpy as np, minflux as mf

    def slow(x):
        k = 0.0
        while k < 4000.0:      # about 4000 iterations per element: seconds for the whole array
            k = k + 1.0 + x * 0.0
        return k

    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background job inherits SIGINT ignored
    x = np.zeros(1 << 19)
    mf.broadcast(slow, x[:4])                  # compile first (not interrupted)
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    start = time.perf_counter()
    try:
        mf.broadcast(slow, x)
        print("finished", time.perf_counter() - start)
    except KeyboardInterrupt:
        print("interrupted", time.perf_counter() - start)
    print(mf.broadcast(slow, x[:3]).tolist())   # the process and the kernel still work
""")


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="needs POSIX signals")
def test_ctrl_c_interrupts_a_kernel_with_loops(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MINFLUX_NUM_THREADS": "2"})
    assert done.returncode == 0, done.stderr
    first, last = done.stdout.strip().splitlines()[-2:]
    assert first.startswith("interrupted"), done.stdout
    assert last == "[4000.0, 4000.0, 4000.0]"


def test_kernels_with_loops_run_in_row_chunks_and_loop_free_ones_in_one_call(monkeypatch):
    import numpy as np

    import minflux as mf
    from minflux.compiler import numba_backend
    from minflux.compiler.layout import plan_layout

    calls = []
    real = numba_backend.run_rows
    monkeypatch.setattr(numba_backend, "run_rows", lambda *a: (calls.append(a[1:3]), real(*a)))

    def looped(x):
        k = 0.0
        while k < 3.0:
            k = k + 1.0
        return k + x

    x = np.zeros(1 << 18)
    rows = plan_layout([x], x.shape).rows
    assert rows > 1
    np.testing.assert_array_equal(mf.broadcast(looped, x), np.full(x.shape, 3.0))
    assert len(calls) == min(rows, numba_backend.LOOP_CHUNKS) and calls[0][0] == 0 and calls[-1][1] == rows
    assert all(a[1] == b[0] for a, b in zip(calls, calls[1:]))   # contiguous chunks, every row once
    calls.clear()
    mf.broadcast(lambda x: x * 2.0 + 1.0, x)
    assert calls == [(0, rows)]


def test_an_interrupted_share_leaves_the_pool_usable():
    import threading

    from minflux.runtime.row_pool import RowPool

    pool = RowPool()
    pool.grow(1)
    seen = []
    gate = threading.Event()

    def call(r0, r1, *args):
        if r0 == 0:
            raise KeyboardInterrupt      # the calling thread's share is interrupted
        gate.wait(1.0)
        seen.append((r0, r1))

    with pytest.raises(KeyboardInterrupt):
        gate.set()
        pool.run(call, 4, 2, ())
    assert seen == [(2, 4)]              # the worker's share finished before run returned
    pool.run(lambda r0, r1: seen.append((r0, r1)), 4, 2, ())
    assert sorted(seen[1:]) == [(0, 2), (2, 4)]


def test_what_a_workers_share_raises_reaches_the_caller_and_the_worker_lives_on():
    from minflux.runtime.row_pool import RowPool

    pool = RowPool()
    pool.grow(1)
    seen = []

    def call(r0, r1, *args):
        seen.append((r0, r1))
        if r0 > 0:
            raise FloatingPointError(f"rows {r0}:{r1}")   # as numpy's check raises in a product's share

    with pytest.raises(FloatingPointError, match="rows 2:4"):
        pool.run(call, 4, 2, ())
    assert sorted(seen) == [(0, 2), (2, 4)]   # the caller's share ran whole too
    seen.clear()
    pool.run(lambda r0, r1: seen.append((r0, r1)), 4, 2, ())   # the same worker serves the next call
    assert sorted(seen) == [(0, 2), (2, 4)]

    def both_raise(r0, r1, *args):
        raise FloatingPointError(f"rows {r0}:{r1}")

    with pytest.raises(FloatingPointError, match="rows 0:2"):   # the caller's own share's first
        pool.run(both_raise, 4, 2, ())
    pool.run(lambda r0, r1: None, 4, 2, ())   # and the worker's is not raised by a later call
