"""The explicit random generator every layer constructor takes."""
from __future__ import annotations

import numpy as np

from ..schedule.traced import TracedGenerator


def as_generator(rng, layer: str) -> np.random.Generator:
    """``rng`` as a ``numpy.random.Generator`` (an int is a seed; inside `mf.compile`'s recording, the
    stand-in of a Generator argument draws as it would); anything else is an error.

    >>> as_generator(0, "Dense").random() == np.random.default_rng(0).random()
    True
    """
    if isinstance(rng, (np.random.Generator, TracedGenerator)):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        return np.random.default_rng(int(rng))
    raise TypeError(f"{layer} needs rng=numpy.random.Generator (or an int seed) for its initial "
                    f"weights, got {type(rng).__name__}; pass e.g. rng=np.random.default_rng(0)")
