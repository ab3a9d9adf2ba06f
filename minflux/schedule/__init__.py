"""Recorded schedules: a call's array operations recorded once and replayed as straight-line code."""
from .operation import operation
from .recorder import NotReplayable, Recording
from .replay import Replay
from .traced import Traced

__all__ = ["NotReplayable", "Recording", "Replay", "Traced", "operation"]
