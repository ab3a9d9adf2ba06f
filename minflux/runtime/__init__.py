"""minflux's runtime: what the process is set to (`settings`: every knob, its variable and whether a
recorded schedule depends on it). It imports nothing else of minflux, and the compiler and every
layer above read their settings from it."""
from . import settings
from .settings import SettingError

__all__ = ["SettingError", "settings"]
