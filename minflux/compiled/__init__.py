"""`mf.compile`: functions of trees recorded once per guard key and replayed without Python per op."""
from .outputs import ReplayMismatch
from .step import CompiledStep, compile

__all__ = ["CompiledStep", "ReplayMismatch", "compile"]
