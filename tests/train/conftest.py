"""A tiny recurrent language model with the models' interface, so the loop can be tested on its own,
and interruptions of its training steps."""
import os
import signal

import numpy as np
import pytest

import minflux as mf
import minflux_train.runs


class TinyLM:
    """A one-layer tanh RNN language model: ``model(tokens, state, slope=None) -> (logits, state,
    boundaries)``.

    Its "boundary" is whether the first hidden unit is positive, so boundary plumbing is exercised, and
    its pre-activations are scaled by ``slope``, so slope annealing changes what it computes.
    """

    def __init__(self, vocab_size, *, embed_size=8, hidden_sizes=(16,), output_embed_size=None, rng,
                 dtype=None, **unused):
        dtype = dtype or np.float32
        hidden = hidden_sizes[0]
        self.E = (rng.standard_normal((vocab_size, hidden)) * 0.3).astype(dtype)
        self.W = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(dtype)
        self.O = (rng.standard_normal((hidden, vocab_size)) / np.sqrt(hidden)).astype(dtype)
        self.b = np.zeros(vocab_size, dtype)
        self.slope = 1.0

    def initial_state(self, batch_size):
        return [{"h": np.zeros((batch_size, self.W.shape[0]), self.W.dtype)}]

    def __call__(self, tokens, state, slope=None):
        slope = self.slope if slope is None else slope
        h = state[0]["h"]
        steps = []
        for x in mf.unstack(mf.take(self.E, tokens, axis=0), axis=1):
            h = mf.tanh((x + mf.matmul(h, self.W)) * slope)
            steps.append(h)
        hs = mf.stack(steps, axis=1)
        logits = mf.matmul(hs, self.O) + self.b
        z = (getattr(hs, "value", hs)[..., :1] > 0).astype(self.W.dtype)
        return logits, [{"h": h}], z


@pytest.fixture
def tiny_model(monkeypatch):
    """Make model.kind = "hmlstm" build a TinyLM."""
    monkeypatch.setitem(minflux_train.runs.MODEL_BUILDERS, "hmlstm",
                        lambda cfg, vocab_size, **common: TinyLM(vocab_size, **common))
    return TinyLM


@pytest.fixture
def validation_stops_improving(monkeypatch):
    """Every validation after the first one of a run scores worse than the one before (the evaluation
    itself runs): a plateau at the second validation, whatever path training took. At a learning rate
    that makes training chaotic, that path turns on the last bits of the products, which the product
    library's choice per shape (timed on each machine) decides."""
    import dataclasses

    from minflux_train.loop import Trainer

    real, calls = Trainer.validate, []

    def validate(self, max_chars=None):
        result = real(self, max_chars)
        calls.append(None)
        return dataclasses.replace(result, nats=float(len(calls)))

    monkeypatch.setattr(Trainer, "validate", validate)


TEXT = "the cat sat on the mat. a dog ran in the fog. " * 12


@pytest.fixture
def cfg(tmp_path):
    """A tiny experiment config on a small text file, training the stand-in model."""
    (tmp_path / "corpus.txt").write_text(TEXT)
    config = tmp_path / "tiny.toml"
    config.write_text(f"""
name = "tiny"
[data]
corpus = "text"
path = "{tmp_path / 'corpus.txt'}"
cache_dir = "{tmp_path / 'cache'}"
[model]
hidden_sizes = [16]
[train]
batch_size = 4
seq_len = 8
epochs = 2
eval_every = 5
checkpoint_every = 3
log_every = 2
device = "cpu"
[sample]
length = 20
prime = "the "
""")
    return config


@pytest.fixture
def nan_loss_at(monkeypatch, tiny_model):
    """``nan_loss_at(n)``: the stand-in model's logits are NaN in step ``n`` only, through data the step
    reads (so a compiled step sees it change too)."""
    from minflux_train.loop import Trainer

    def arrange(step: int) -> None:
        real_call, real_step = tiny_model.__call__, Trainer.train_step
        poison = np.ones((), np.float32)

        def poisoned(self, tokens, state, slope=None):
            logits, state, z = real_call(self, tokens, state, slope)
            return logits * poison, state, z

        def poisoned_at_step(self, window):
            poison[...] = np.nan if self.position.step == step - 1 else 1.0
            return real_step(self, window)

        monkeypatch.setattr(tiny_model, "__call__", poisoned)
        monkeypatch.setattr(Trainer, "train_step", poisoned_at_step)
    return arrange


class Interruptions:
    """What a test does to `Trainer.train_step`: ``kill_at(n)`` raises SystemExit when step ``n``
    would run (a kill: no cleanup, no checkpoint), ``ctrl_c()`` sends SIGINT after every step, and
    ``stop()`` lets the steps run as they are again."""

    def __init__(self, monkeypatch):
        from minflux_train.loop import Trainer

        self._monkeypatch, self._trainer, self._real = monkeypatch, Trainer, Trainer.train_step

    def kill_at(self, step: int) -> None:
        real = self._real

        def dies(trainer, window):
            if trainer.position.step == step:
                raise SystemExit("killed")
            return real(trainer, window)
        self._monkeypatch.setattr(self._trainer, "train_step", dies)

    def ctrl_c(self) -> None:
        real = self._real

        def interrupted(trainer, window):
            result = real(trainer, window)
            os.kill(os.getpid(), signal.SIGINT)
            return result
        self._monkeypatch.setattr(self._trainer, "train_step", interrupted)

    def stop(self) -> None:
        self._monkeypatch.setattr(self._trainer, "train_step", self._real)


@pytest.fixture
def interrupt(monkeypatch):
    """`Interruptions` of this test's training steps (undone after it)."""
    return Interruptions(monkeypatch)
