"""TensorBoard event files of a run (``train.tensorboard = true``), through the optional tensorboardX.

What `metrics.jsonl` records is also written to ``RUN/tensorboard`` as it is recorded: the training
loss, bits per character, learning rate and speed of each metrics line, each layer's boundary rate
(training and validation), the validation bits per character (the end validation at the run's last
step included), and the sample as text. The gradient norm is not among them: the training step keeps
it on the device (inside the clipping rule), and reading it at every step would cost a
synchronisation that no other part of the loop needs. A resumed run hides the events after its
checkpoint's step (they are trained again), so each step has one point per curve.

    pip install 'minflux[tensorboard]'      # or: pip install tensorboardX
    python -m train --set train.tensorboard=true --out runs/tb
    tensorboard --logdir runs/tb/tensorboard

Without tensorboardX, ``train.tensorboard = true`` is a one-line error before training starts.
"""
from __future__ import annotations

from pathlib import Path

from .config import ConfigError

MISSING = ("train.tensorboard = true needs the tensorboardX package, which is not installed: pip install "
           "'minflux[tensorboard]' (or pip install tensorboardX), or set train.tensorboard = false")

SCALARS = {"train": ("loss", "bpc", "lr", "chars_per_s"), "valid": ("bpc",)}


def scalars(kind: str, fields: dict) -> list[tuple[str, float]]:
    """The ``(tag, value)`` pairs a metrics record of ``kind`` becomes.

    >>> scalars("train", {"step": 4, "loss": 1.2, "bpc": 1.7, "lr": 0.002, "boundary_rates": [0.5, 0.25]})
    [('train/loss', 1.2), ('train/bpc', 1.7), ('train/lr', 0.002), ('train/boundary_rate/layer_1', 0.5), ('train/boundary_rate/layer_2', 0.25)]
    >>> scalars("end", {"step": 9, "stopped": "max_steps", "valid_bpc": 1.5, "best_bpc": 1.4})
    [('valid/bpc', 1.5), ('valid/best_bpc', 1.4)]
    """
    if kind == "end":
        pairs = [("valid/bpc", fields.get("valid_bpc")), ("valid/best_bpc", fields.get("best_bpc"))]
        group = "valid"
    else:
        pairs = [(f"{kind}/{name}", fields.get(name)) for name in SCALARS.get(kind, ())]
        group = kind
    if kind in ("train", "valid", "end"):
        pairs += [(f"{group}/boundary_rate/layer_{k + 1}", rate)
                  for k, rate in enumerate(fields.get("boundary_rates") or [])]
    return [(tag, float(v)) for tag, v in pairs if isinstance(v, (int, float)) and not isinstance(v, bool)]


class Board:
    """`MetricsLog` ``metrics`` whose records also go to TensorBoard event files in ``folder`` (the
    sample text from ``sample_file`` with the end record). Anything else is the metrics log's.
    Needs tensorboardX::

        run = Path("runs/x")
        board = Board(MetricsLog(run / "metrics.jsonl"), run / "tensorboard", run / "sample.txt")
        board.write("train", step=10, loss=2.1, bpc=3.0, lr=0.002)  # a line in metrics.jsonl, 3 scalars
        board.close()                                                  # the event file is complete
    """

    def __init__(self, metrics, folder: Path, sample_file: Path):
        from tensorboardX import SummaryWriter  # checked by `mirrored`

        self._writer_class = SummaryWriter
        self.metrics, self.folder, self.sample_file = metrics, Path(folder), Path(sample_file)
        self.writer = None
        self.purge_from = None
        self.opened = 0

    def __getattr__(self, name):
        return getattr(self.metrics, name)

    def _open(self):
        if self.writer is None:  # a file per session (or reopening), in the order they were written
            self.opened += 1
            suffix = f".from-step-{self.purge_from or 0:010d}-{self.opened:03d}"
            self.writer = self._writer_class(logdir=str(self.folder), purge_step=self.purge_from,
                                             filename_suffix=suffix, flush_secs=30)
            self.purge_from = None
        return self.writer

    def write(self, kind: str, **fields) -> None:
        self.metrics.write(kind, **fields)
        step = fields.get("step", 0)
        writer = self._open()
        for tag, value in scalars(kind, fields):
            writer.add_scalar(tag, value, step)
        if kind == "end" and "valid_bpc" in fields and self.sample_file.is_file():
            writer.add_text("sample", self.sample_file.read_text(encoding="utf-8"), step)

    def truncate_after(self, step: int, keep_end: bool = False) -> None:
        self.metrics.truncate_after(step, keep_end=keep_end)
        self.purge_from = step + 1  # TensorBoard hides the events of the steps trained again

    def clear(self) -> None:
        self.metrics.clear()
        for old in self.folder.glob("events.out.tfevents.*"):
            old.unlink()

    def close(self) -> None:
        """Write out what is queued (tensorboardX writes in a thread) and close the file."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def mirrored(metrics, cfg, run, main: bool = True):
    """``metrics``, or a `Board` around it when ``train.tensorboard`` is on (on rank 0 only); a
    `ConfigError` when it is on and tensorboardX is missing.

    >>> from minflux_train.config import Config
    >>> mirrored("the metrics log", Config(), run=None)
    'the metrics log'
    """
    if not cfg.train.tensorboard:
        return metrics
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise ConfigError(MISSING) from None
    return Board(metrics, run.path / "tensorboard", run.sample) if main else metrics
