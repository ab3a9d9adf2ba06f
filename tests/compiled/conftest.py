"""Fixtures of the compiled-step tests."""
from __future__ import annotations

import pytest


@pytest.fixture
def replays_counted_not_timed(monkeypatch):
    """A replay compiles after `COMPILE_AFTER` program replays however long they take: a test that
    counts replays must not see a loaded machine compile sooner (the time rule of
    `minflux.schedule.replay`)."""
    monkeypatch.setattr("minflux.schedule.replay.COMPILE_SECONDS_PER_OPERATION", float("inf"))
