"""Recorded schedules: a call's array operations recorded once and replayed without Python per op."""
from .operation import operation, recording_of
from .recorder import NotReplayable, Recording
from .replay import Replay
from .traced import Traced

__all__ = ["NotReplayable", "Recording", "Replay", "Traced", "operation", "recording_of"]
