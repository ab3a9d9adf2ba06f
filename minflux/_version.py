"""The minflux version, read by checkpoints and the kernel cache."""
__version__ = "0.1.0"
