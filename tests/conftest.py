"""Shared test configuration: one kernel cache for the whole session (a fresh directory, unless
``MINFLUX_CACHE_DIR`` is set), one directory for what tests and doctests make with `tempfile` (each
process's own, removed as it ends), tests marked ``gpu`` skip cleanly without CuPy and a CUDA device,
and a test that leaves a signal handler of its own installed fails (Ctrl-C must always stop the run).

Elementwise kernels run on numba unless a test (or its module, through ``pytestmark``) is marked
``numpy_kernels``: such a test checks values and gradients, not the compiled kernels, and runs them on
the numpy reference backend instead of compiling its own numba kernels (compiling is most of the
suite's time). Every compiled-kernel feature keeps tests of its own on numba; each test starts on
its backend and the backend is put back after it, whatever the test set."""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile

import numpy as np
import pytest

if "MINFLUX_CACHE_DIR" not in os.environ:  # set before any kernel is compiled; subprocesses (and
    # pytest-xdist's workers, started after this file is loaded) inherit it; its creator removes it
    os.environ["MINFLUX_CACHE_DIR"] = tempfile.mkdtemp(prefix="minflux-test-cache-")
    atexit.register(shutil.rmtree, os.environ["MINFLUX_CACHE_DIR"], ignore_errors=True)

tempfile.tempdir = tempfile.mkdtemp(prefix="test-files-")   # the docstrings' examples write files too
atexit.register(shutil.rmtree, tempfile.tempdir, ignore_errors=True)

import minflux as mf
from minflux.backend import gpu_available

DEFAULT_ELEMENTWISE = mf.get_elementwise_backend()   # numba, unless MINFLUX_ELEMENTWISE says otherwise


def pytest_collection_modifyitems(config, items):
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="needs CuPy and a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def signal_handlers_are_restored():
    """Fail a test that leaves its own SIGINT or SIGTERM handler behind (and put the old one back)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    leaked = [signal.Signals(s).name for s, h in before.items() if signal.getsignal(s) is not h]
    for s, h in before.items():
        signal.signal(s, h)
    assert not leaked, f"the test left its own {' and '.join(leaked)} handler installed"


@pytest.fixture(autouse=True)
def elementwise_backend_of_the_test(request, monkeypatch):
    """The test's CPU backend of elementwise kernels: numpy when marked ``numpy_kernels`` (for the
    processes the test starts too), else the session's default (numba unless ``MINFLUX_ELEMENTWISE``
    names another)."""
    before = mf.get_elementwise_backend()
    name = "numpy" if request.node.get_closest_marker("numpy_kernels") else DEFAULT_ELEMENTWISE
    if name == "numpy":
        monkeypatch.setenv("MINFLUX_ELEMENTWISE", name)
    mf.set_elementwise_backend(name)
    yield name
    mf.set_elementwise_backend(before)


@pytest.fixture(params=["numba", "numpy"])
def backend(request):
    """Run the test once with each CPU backend of elementwise kernels (restored afterwards)."""
    before = mf.get_elementwise_backend()
    mf.set_elementwise_backend(request.param)
    yield request.param
    mf.set_elementwise_backend(before)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator, so every test draws the same numbers on every run."""
    return np.random.default_rng(1234)


class FakeCupyArray:
    """Stands in for ``cupy.ndarray`` where CuPy is absent: a distinct array type holding numpy data."""

    def __init__(self, data):
        self.data = np.array(data)

    shape = property(lambda self: self.data.shape)
    dtype = property(lambda self: self.data.dtype)


@pytest.fixture
def replays_counted_not_timed(monkeypatch):
    """A replay compiles after `COMPILE_AFTER` program replays however long they take: a test that
    counts replays must not see a loaded machine compile sooner (the time rule of
    `minflux.schedule.replay`)."""
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_SECONDS_PER_OPERATION", float("inf"))


@pytest.fixture
def fake_cupy(monkeypatch):
    """Install a fake ``cupy`` module (one device) into minflux's backend for this test."""
    import types

    import minflux.backend as backend

    fake = types.SimpleNamespace(
        __name__="cupy",
        ndarray=FakeCupyArray,
        asarray=FakeCupyArray,
        asnumpy=lambda a: a.data.copy(),
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(getDeviceCount=lambda: 1)),
    )
    monkeypatch.setattr(backend, "_cupy", fake)
    return fake
