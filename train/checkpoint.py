"""Training checkpoints: `minflux.save` / `minflux.load` plus what a run needs to resume exactly.

A checkpoint holds the model, the optimiser state and as metadata: the step, epoch and window (the
data position), the recurrent state carried into the next window, the random generator, the
learning-rate schedule, the best validation result so far and the vocabulary. `minflux.save` writes a
temporary file and renames it, so a crash while saving leaves the previous checkpoint intact.
"""
from __future__ import annotations

from pathlib import Path

import minflux as mf


def save_checkpoint(path: str | Path, model, opt_state, **meta) -> Path:
    """Save ``model``, ``opt_state`` and metadata (arrays, Generators and JSON-able values) atomically.

    >>> import tempfile, numpy as np
    >>> model = {"w": np.arange(3.0)}
    >>> opt_state = mf.optim.setup(mf.optim.Adam(), model)
    >>> path = save_checkpoint(Path(tempfile.mkdtemp()) / "c.h5", model, opt_state, step=7,
    ...                        recurrent_state=[{"h": np.ones((2, 3))}])
    >>> fresh = {"w": np.zeros(3)}
    >>> meta = load_checkpoint(path, fresh, mf.optim.setup(mf.optim.Adam(), fresh))
    >>> meta["step"], fresh["w"].tolist(), meta["recurrent_state"][0]["h"].shape
    (7, [0.0, 1.0, 2.0], (2, 3))
    >>> read_meta(path)["step"]
    7
    """
    return Path(mf.save(str(path), model=model, opt_state=opt_state, **meta))


def load_checkpoint(path: str | Path, model, opt_state=None) -> dict:
    """Load ``path`` into ``model`` (and ``opt_state``) in place and return the metadata."""
    return mf.load(str(path), model=model, opt_state=opt_state)


def read_meta(path: str | Path) -> dict:
    """The metadata of a checkpoint without loading it into a model."""
    return mf.io.read(str(path)).meta
