"""The training loop: truncated BPTT with Adam, validation, learning-rate schedules, early stopping,
checkpoints, resume.

Every step reads one window of B contiguous streams (see `train.data.batching`), computes the mean
cross-entropy per character with `minflux.withgradient`, and updates the model with
``chain(ClipNorm(clip_norm), Adam(lr))``, the rate given by `train.lr_schedule` (a rate that changes
at every step comes to the step as data). The recurrent state returned by the model is carried into
the next window and reset to zeros at the start of each epoch. The HM-LSTM's boundary slope is
annealed per epoch, ``a = min(5, 1 + 0.04 * epoch)`` (`models.annealed_slope`). With
``train.early_stopping = N`` the run stops after N validations in a row without a new best.

Validation records carry the HM-LSTM's boundary statistics (each detector's rate, each layer's FLUSH /
UPDATE / COPY fractions; `models.BoundaryStats`), the progress bar shows them, and a detector that has
stopped firing (or fires on every character) for two validations is reported once as a warning
(`train.boundary_watch`). The last step is validated once, over the whole split (or its first
``train.final_eval_chars`` characters), in the ``end`` record: it updates ``best`` but not the
learning-rate schedule, since training is over. A finished run resumed with nothing left to train
keeps its recorded end validation and sample instead of computing them again.

Everything a run needs to continue exactly is in its ``latest`` checkpoint: parameters, optimiser
state, data position (epoch, window), recurrent state, random generator, learning-rate schedule, the
HM-LSTM's slope, the running means of the next metrics line, the best validation result and the
validations since it. Ctrl-C or
SIGTERM finish the current step, save, and stop; ``--resume`` then continues as if nothing had happened
(after a hard kill it continues from the last checkpoint, and the steps after it are recomputed
identically). A NaN or infinite loss or gradient stops the run before the parameters change, naming
the first array whose gradient is not finite and leaving the last good checkpoint as it was.
"""
from __future__ import annotations

import contextlib
import logging
import math
import time

import numpy as np

import minflux as mf
from minflux_models.boundaries import annealed_slope, boundary_rates

from minflux.files import write_atomically

from .board import mirrored
from .boundary_watch import BoundaryWatch
from .config import Config, OptimConfig, dump_toml, parse_config
from .divergence import OVERFLOWED, TrainingDiverged, divergence_advice
from .eta import EndEstimate
from .evaluate import Evaluation, evaluate_tokens
from .lr_schedule import LearningRate
from .meter import Meter
from .metrics import MetricsLog
from .outcome import Outcome, Position
from .parallel import DataParallel
from .progress import FILE_ONLY, progress_bar, progress_line
from .resume import check_resumable
from .runs import RunDir, RunError, batches, build_model, corpus_for, pick_device, split_tokens
from .sample import check_prime, generate
from .step import rate_as_data, slope_as_data, training_step, why_not_finite
from .stop_flag import StopFlag
from .stopping import Budget

log = logging.getLogger(__name__)

LN2 = math.log(2)


__all__ = ["Outcome", "Position", "Trainer", "TrainingDiverged", "annealed_slope", "train"]

# what a checkpoint's metadata must hold for a run to continue from it
RESUME_KEYS = ("step", "epoch", "window", "recurrent_state", "rng", "schedule", "best_bpc", "elapsed",
               "vocabulary", "config", "slope")


def optimiser(cfg: OptimConfig, lr: float | None = None) -> mf.optim.Rule:
    """``chain(ClipNorm(clip_norm), Adam(lr))`` (no clipping when ``clip_norm`` is 0).

    >>> optimiser(OptimConfig(lr=0.01, clip_norm=0.0))
    OptimiserChain(rules=(Adam(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-08),))
    """
    clip = [mf.optim.ClipNorm(cfg.clip_norm, throw=True)] if cfg.clip_norm > 0 else []
    return mf.optim.chain(*clip, mf.optim.Adam(lr=cfg.lr if lr is None else lr))


def _rates(boundaries):
    """Each boundary detector's firing rate in a window, or None for a model without detectors."""
    if boundaries is None or not boundaries.shape[-1]:
        return None
    return np.array(boundary_rates(boundaries))


class Trainer:
    """One run: builds data, model and optimiser from ``cfg`` and trains into ``run``.

    ``set_keys`` are the config keys the command line set (``--set``); on resume, a learning rate named
    there is applied even when it equals the checkpoint's initial one.
    """

    def __init__(self, cfg: Config, run: RunDir, resume: bool = False, set_keys=()):
        self.cfg, self.run, self.resume, self.set_keys = cfg, run, resume, set(set_keys)
        t = cfg.train
        self.device = pick_device(t.device)
        self.parallel = DataParallel(t.batch_size)
        self.corpus = self.parallel.once(lambda: corpus_for(cfg))
        self.vocab = self.corpus.vocab
        train_tokens = split_tokens(self.corpus, "train", cfg)
        self.valid_tokens = split_tokens(self.corpus, "valid", cfg)
        self.batcher = batches(train_tokens, cfg)
        check_prime(self.vocab, cfg.sample.prime)  # before training, not after it
        self.rng = np.random.default_rng(t.seed)
        self.model = self.parallel.same_everywhere(
            mf.to_device(build_model(cfg.model, len(self.vocab), self.rng), self.device))
        self.opt_state = mf.optim.setup(optimiser(cfg.optim), self.model)
        self.step = self._new_step()
        self.schedule = LearningRate(cfg.optim, self.budget().steps)
        self.stale = 0  # validations in a row without a new best (train.early_stopping)
        self.position = Position()
        self.state = None
        self.best_bpc: float | None = None
        self.elapsed = 0.0
        self.meter = Meter()
        log_file = mirrored(MetricsLog(run.metrics), cfg, run, self.parallel.is_main)  # train.tensorboard
        self.metrics = self.parallel.metrics(log_file)
        self.stop = StopFlag()
        self.begun = False
        self.boundary_watch = BoundaryWatch()
        self.hierarchy = ""  # the last validation's boundary summary, for the progress display
        self.ended: dict | None = None  # the "end" record of a finished run that was resumed
        final = len(self.valid_tokens) - 1
        self.end_estimate = EndEstimate(min(t.final_eval_chars or final, final),
                                        t.eval_batch_size or t.batch_size, t.seq_len,
                                        len(cfg.sample.prime) + cfg.sample.length)

    # -- checkpoints --------------------------------------------------------------------------

    def _meta(self, recurrent_state) -> dict:
        p = self.position
        return dict(step=p.step, epoch=p.epoch, window=p.window, recurrent_state=recurrent_state,
                    rng=self.rng, schedule=self.schedule.state_dict(), best_bpc=self.best_bpc,
                    elapsed=self.elapsed, vocabulary=self.vocab.to_json(), config=dump_toml(self.cfg),
                    slope=float(getattr(self.model, "slope", 1.0)), meter=self.meter.state_dict(),
                    stale_validations=self.stale)

    def save(self, which: str = "latest") -> None:
        state = self.parallel.gather_state(self.state)  # every rank takes part; rank 0 writes
        if self.parallel.is_main:
            mf.save(self.run.checkpoint(which), model=self.model, opt_state=self.opt_state,
                    **self._meta(state))

    def begin(self) -> None:
        """Restore the latest checkpoint (on resume) or start the metrics afresh; before `fit`."""
        if self.resume:
            self.restore()
        else:
            self.metrics.clear()
        self.begun = True

    def restore(self) -> None:
        """Continue from the run's latest checkpoint, applying the config changes `check_resumable`
        allows (checked before anything is loaded)."""
        file = self.run.latest
        if not file.is_file():
            raise RunError(f"--resume: {self.run} has no checkpoint ({file}); start it afresh without "
                           "--resume")
        meta = mf.io.read(file).meta
        missing = [k for k in RESUME_KEYS if k not in meta]
        if missing:
            raise mf.io.CheckpointError(f"{file} cannot be resumed: its metadata lacks {', '.join(missing)}; "
                                        "it was not written by python -m train")
        if meta["vocabulary"] != self.vocab.to_json():
            raise RunError(f"--resume: the corpus now has a different vocabulary than the checkpoint "
                           f"{file}; its data files changed (set data.path back, or start a new run)")
        trained = parse_config(meta["config"], f"{file} (its config)")
        changed = check_resumable(trained, self.cfg, str(self.run))
        self.opt_state = mf.optim.setup(optimiser(trained.optim), self.model)
        mf.load(file, model=self.model, opt_state=self.opt_state)
        self.position = Position(meta["step"], meta["epoch"], meta["window"])
        state = meta["recurrent_state"]
        self.state = None if state is None else mf.to_device(self.parallel.local_state(state), self.device)
        self.rng = meta["rng"]
        try:
            self.schedule.load_state_dict(meta["schedule"])
        except ValueError as exc:
            raise RunError(f"--resume: {exc} ({file})") from None
        self.best_bpc, self.elapsed = meta["best_bpc"], meta["elapsed"]
        self.stale = meta.get("stale_validations", 0)  # absent in checkpoints of older versions
        if hasattr(self.model, "slope"):
            self.model.slope = meta["slope"]
        if "meter" in meta:  # absent in checkpoints of older versions
            self.meter.load_state_dict(meta["meter"])
        self._apply_changes(changed)
        self.ended = self._end_record(self.position.step)
        self.metrics.truncate_after(self.position.step, keep_end=self.ended is not None)
        log.info("resumed %s at step %d (epoch %d, window %d of %d)", self.run, self.position.step,
                 self.position.epoch, self.position.window, len(self.batcher))

    def _apply_changes(self, changed: list[str]) -> None:
        """Apply changed optimiser keys to the restored optimiser and schedule (the other keys that may
        change are read where they are used)."""
        o = self.cfg.optim
        leaves = [leaf for _, leaf in mf.optim.named_state_leaves(self.opt_state)]
        if "optim.clip_norm" in changed:
            rule = optimiser(o, lr=leaves[0].rule.rules[-1].lr) if leaves else None
            for leaf in leaves:  # the clipping rules hold no state; Adam's is the chain's last
                leaf.rule, leaf.state = rule, tuple(() for _ in rule.rules[:-1]) + (leaf.state[-1],)
        if "optim.lr" in changed or "optim.lr" in self.set_keys:
            log.info("learning rate set to %g on resume (it was %g)", o.lr, self.schedule.lr)
            mf.optim.adjust(self.opt_state, lr=o.lr)
            self.schedule.set_lr(o.lr)
        self.schedule.resumed_with(o)
        for key in changed:
            log.info("changed on resume: %s", key)

    # -- steps --------------------------------------------------------------------------------

    def _diverged(self, what: str) -> TrainingDiverged:
        p = self.position
        last = self.run.latest if self.run.latest.is_file() else None
        where = (f"the last good checkpoint {last} is untouched; after changing the config, continue "
                 f"from it with --resume") if last else "no checkpoint had been written yet"
        return TrainingDiverged(
            f"training stopped: {what} at step {p.step + 1} (epoch {p.epoch}, window {p.window}); the "
            f"parameters were not updated and {where}. "
            f"{divergence_advice(self.cfg.optim, self.schedule.rate(p.step))}")

    def _new_step(self):
        """`train.step.training_step`, compiled unless ``train.compile = false``; a model whose step
        cannot be replayed (it reads its data on the host) trains eagerly after one warning."""
        return mf.compile(training_step, fallback="eager") if self.cfg.train.compile else training_step

    def _step_now(self):
        """The step to call now: every ``train.compile_check_every`` steps a compiled step's replay
        is checked against the eager step (`mf.ReplayMismatch` stops the run)."""
        every = self.cfg.train.compile_check_every
        checked = getattr(self.step, "checked", None)
        if checked is not None and every and (self.position.step + 1) % every == 0:
            return checked
        return self.step

    def train_step(self, window):
        """One step (`train.step`), compiled or eager; over MPI ranks the step itself averages the
        loss and the gradients, and the boundary rates are averaged here."""
        inputs, targets = mf.to_device((window.inputs, window.targets), self.device)
        rate = contextlib.nullcontext()
        if self.schedule.per_step:
            rate = rate_as_data(self.opt_state, self.schedule.rate(self.position.step))
        with slope_as_data(self.model) as slope, rate:
            try:
                loss, self.state, boundaries = self._step_now()(self.model, self.opt_state, self.state,
                                                                inputs, targets, slope)
            except FloatingPointError:
                why = why_not_finite(self.model, self.state, inputs, targets, slope)
                if why == OVERFLOWED and self.parallel.size > 1:
                    why = (f"the loss or the gradients averaged over the {self.parallel.size} ranks are not "
                           "finite (this rank's own are)")
                raise self._diverged(why) from None
        return float(mf.to_numpy(loss)), self.parallel.mean_rates(_rates(boundaries))

    def validate(self, max_chars: int | None = None) -> Evaluation:
        t = self.cfg.train
        dp = self.parallel
        return dp.combine(evaluate_tokens(self.model, self.valid_tokens, t.eval_batch_size or t.batch_size,
                                          t.seq_len, self.device, t.eval_chars if max_chars is None else
                                          max_chars, shard=(dp.rank, dp.size)))

    def _after_validation(self, result: Evaluation) -> None:
        p = self.position
        improved = self.best_bpc is None or result.bpc < self.best_bpc
        self.stale = 0 if improved else self.stale + 1
        old_lr = self.last_rate()
        self.metrics.write("valid", step=p.step, epoch=p.epoch, bpc=result.bpc, chars=result.chars,
                           streams=result.streams, lr=old_lr, best=improved, **self._hierarchy(result))
        log.info("step %d: validation %s%s", p.step, result, " (best so far)" if improved else "")
        lr = self.schedule.validated(result.bpc)
        if lr is not None:
            if not self.schedule.per_step:  # else the rate comes to each step as data
                mf.optim.adjust(self.opt_state, lr=lr)
                self.step = self._new_step()  # the old schedules hold the old rate: none is used again
            self.metrics.write("lr", step=p.step, lr=lr, previous=old_lr)
            log.info("validation did not improve: learning rate %.3g -> %.3g", old_lr, lr)
        if improved:
            self.best_bpc = result.bpc
            self.save("best")

    def _hierarchy(self, result: Evaluation) -> dict:
        """The boundary statistics of a validation for its record; logs them and watches for collapse."""
        stats = result.boundaries
        if stats is None:
            return {}
        log.info("step %d: boundaries %s", self.position.step, stats)
        fractions = zip(*(stats.fractions(k) for k in ("flush", "update", "copy")))
        self.hierarchy = ("val z " + "/".join(f"{r:.2f}" for r in stats.rates) + " F/U/C "
                          + " ".join(f"{f:.2f}/{u:.2f}/{c:.2f}" for f, u, c in fractions))
        self.boundary_watch.check(self.position.step, stats.rates)
        return stats.record()

    # -- the loop -----------------------------------------------------------------------------

    def _set_slope(self) -> None:
        if self.cfg.train.slope_annealing and hasattr(self.model, "slope"):
            self.model.slope = annealed_slope(self.position.epoch)

    def budget(self) -> Budget:
        """How far this run trains (`train.stopping.Budget`)."""
        t = self.cfg.train
        return Budget.of(epochs=t.epochs, max_steps=t.max_steps, max_minutes=t.max_minutes,
                         windows_per_epoch=len(self.batcher), early_stopping=t.early_stopping)

    def fit(self) -> Outcome:
        """Train until the epochs, ``max_steps`` or ``max_minutes`` run out, validation stops improving
        (``train.early_stopping``) or a signal arrives."""
        try:
            return self._fit()
        finally:
            self.metrics.close()  # TensorBoard's event files are complete once closed

    def _fit(self) -> Outcome:
        t = self.cfg.train
        if not self.begun:
            self.begin()
        budget = self.budget()
        p = self.position
        log.info("%s | %s | %s parameters on %s | %d windows of %dx%d per epoch | training %s", self.run,
                 self.corpus.summary(), f"{mf.nn.parameter_count(self.model):,}", self.device,
                 len(self.batcher), t.batch_size, t.seq_len, budget.describe())
        stopped = "early_stopping" if self.stopped_improving() else budget.stop_reason
        meter = self.meter
        meter.clock_starts()
        session_start = time.perf_counter() - self.elapsed
        first_step, first_elapsed = p.step, self.elapsed
        bar = progress_bar(total=budget.steps, initial=p.step, desc=self.cfg.name, unit="step",
                           disable=None if self.parallel.is_main else True)
        with bar, self.stop.installed():
            while p.step < budget.steps and stopped != "early_stopping":
                if self.elapsed >= budget.seconds:
                    stopped = "time"
                    break
                if p.window == 0 or self.state is None:
                    self._set_slope()
                    self.state = self.model.initial_state(self.parallel.local_batch)
                window = self.parallel.shard(self.batcher.window(p.window))
                loss, rates = self.train_step(window)
                p.step, p.window = p.step + 1, p.window + 1
                epoch_done = p.window == len(self.batcher)
                if epoch_done:
                    p.epoch, p.window, self.state = p.epoch + 1, 0, None
                self.elapsed = time.perf_counter() - session_start
                meter.add(loss, window.targets.size * self.parallel.size, rates)
                session_steps, session_seconds = p.step - first_step, self.elapsed - first_elapsed
                bar.total = budget.projected_steps(p.step, self.elapsed, session_steps, session_seconds)
                if p.step % t.log_every == 0 or p.step == budget.steps:
                    self._log_training(meter.take(), bar, session_seconds / session_steps)
                bar.update(1)
                due = (t.eval_every and p.step % t.eval_every == 0) or (not t.eval_every and epoch_done)
                last = (p.step >= budget.steps or self.elapsed >= budget.seconds) and not self.stop.reason
                due = due and not last  # the last step is validated once, by _finish
                if due:
                    began = time.perf_counter()
                    result = self.validate()
                    self.end_estimate.measured(time.perf_counter() - began, result.chars)
                    self._after_validation(result)
                    meter.pause(time.perf_counter() - began)  # validation is not training speed
                if due or epoch_done or p.step % t.checkpoint_every == 0:
                    self.save("latest")
                # every rank stops at the same step when any was signalled or out of time
                stopping, self.elapsed = self.parallel.agree(self.stop.reason is not None, self.elapsed)
                if stopping:
                    stopped = "interrupted"
                    break
                if due and self.stopped_improving():
                    stopped = "early_stopping"
                    log.info("step %d: %d validations in a row without improvement (train.early_stopping)",
                             p.step, self.stale)
        self.save("latest")
        return self._finish(stopped, budget, p.step - first_step)

    def stopped_improving(self) -> bool:
        """Whether ``train.early_stopping`` validations in a row have not improved on the best."""
        patience = self.cfg.train.early_stopping
        return bool(patience) and self.stale >= patience

    def last_rate(self) -> float:
        """The learning rate of the last step taken (of the first, before any)."""
        return self.schedule.rate(max(self.position.step - 1, 0))

    def _log_training(self, summary: dict, bar, seconds_per_step: float) -> None:
        p = self.position
        self.metrics.write("train", step=p.step, epoch=p.epoch, **summary, lr=self.last_rate(),
                           slope=float(getattr(self.model, "slope", 1.0)), seconds=self.elapsed)
        z = summary["boundary_rates"]
        bar.set_postfix_str(f"loss {summary['loss']:.3f} bpc {summary['bpc']:.3f} "
                            f"{summary['chars_per_s']:,.0f} char/s"
                            + (f" z {'/'.join(f'{r:.2f}' for r in z)}" if z else "")
                            + (f" | {self.hierarchy}" if self.hierarchy else ""))
        line = progress_line(p.step, bar.total, p.epoch, summary, self.last_rate(), self.elapsed,
                             (bar.total - p.step) * seconds_per_step
                             + self.end_estimate.seconds(seconds_per_step))
        if bar.disable:  # no terminal: the line is the progress report
            log.info(line)
        else:
            log.info(line, extra=FILE_ONLY)

    def _finish(self, stopped: str, budget: Budget, session_steps: int) -> Outcome:
        outcome = Outcome(self.run, stopped, self.position, budget=budget, session_steps=session_steps,
                          elapsed=self.elapsed, best_bpc=self.best_bpc)
        if stopped == "interrupted":
            self.metrics.write("end", step=self.position.step, stopped=stopped)
            return outcome
        if session_steps == 0 and self.ended is not None:
            return self._ended_again(outcome)
        result = self.validate(max_chars=self.cfg.train.final_eval_chars)
        improved = self.best_bpc is None or result.bpc < self.best_bpc
        if improved:
            self.best_bpc = outcome.best_bpc = result.bpc
            self.save("best")
        hierarchy = self._hierarchy(result)
        s = self.cfg.sample
        outcome.valid = result
        if self.parallel.is_main:
            outcome.sample = generate(self.model, self.vocab, s.prime, s.length, s.temperature,
                                      np.random.default_rng(self.cfg.train.seed), self.device)
            write_atomically(self.run.sample, s.prime + outcome.sample + "\n")
        self.metrics.write("end", step=self.position.step, stopped=stopped, valid_bpc=result.bpc,
                           valid_chars=result.chars, streams=result.streams, best_bpc=self.best_bpc,
                           seconds=self.elapsed, **hierarchy)
        return outcome

    def _end_record(self, step: int) -> dict | None:
        """The ``end`` record of a run that finished at ``step`` (validated and sampled), if any."""
        record = None
        if self.parallel.is_main:  # the other ranks write no metrics
            ends = [r for r in self.metrics.read() if r["kind"] == "end" and r["step"] == step]
            if ends and ends[-1].get("stopped") != "interrupted" and "valid_bpc" in ends[-1] \
                    and self.run.sample.is_file():
                record = ends[-1]
        return self.parallel.from_main(record)

    def _ended_again(self, outcome: Outcome) -> Outcome:
        """A finished run resumed with nothing to train: its recorded end validation and saved sample
        stand (nothing is recomputed; ``train.evaluate`` and ``train.sample`` make new ones)."""
        end = self.ended
        outcome.valid = Evaluation(end["valid_bpc"] * LN2, end["valid_chars"], end["streams"])
        prime = self.cfg.sample.prime
        text = self.run.sample.read_text(encoding="utf-8").removesuffix("\n")
        outcome.sample = text[len(prime):] if text.startswith(prime) else text
        outcome.recorded = True  # its end record was kept in metrics.jsonl
        return outcome


def start_run(cfg: Config, run: RunDir, resume: bool, set_keys=(), source: str = "") -> Trainer:
    """A `Trainer` that has begun (restored, on resume) in ``run``, whose config.toml is then written.

    The caller holds ``run.locked()``. A fresh run refuses a directory that already holds one.
    """
    run.check_files()
    if not resume and run.latest.is_file():
        raise RunError(f"{run} already holds a run; continue it with --resume, or choose another --out")
    trainer = Trainer(cfg, run, resume, set_keys)
    trainer.begin()
    if trainer.parallel.is_main:
        run.write_config(cfg, source)
    return trainer


def train(cfg: Config, run: RunDir, resume: bool = False, set_keys=()) -> Outcome:
    """Train ``cfg`` into run directory ``run`` (continuing its latest checkpoint when ``resume``).

    What ``python -m train`` does, minus the printing::

        from minflux_train.config import load_config
        from minflux_train.loop import train
        from minflux_train.runs import RunDir
        outcome = train(load_config("default", ["train.max_steps=100"]), RunDir("runs/try"))
        print(outcome.valid, outcome.sample)
    """
    with run.locked():
        return start_run(cfg, run, resume, set_keys).fit()
