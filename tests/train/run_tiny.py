"""Run ``python -m train`` with the stand-in model in a child process: ``python run_tiny.py ARGS...``.

``RUN_TINY_STEP_SECONDS`` slows every step down (so a test can kill the process mid-run);
``RUN_TINY_FSIZE`` sets RLIMIT_FSIZE (bytes) once training has started, with SIGXFSZ ignored, so a
write past it fails the way a full disk does. ``RUN_TINY_PID_DIR`` makes each MPI rank write its pid
to ``rank<N>.pid`` there (so a test can kill one rank). ``RUN_TINY_NAN_RANK`` makes that MPI rank's
parameters NaN before its fourth step (so a test can see every rank stop together).
"""
import os
import resource
import signal
import sys
import time
from pathlib import Path


def slow_step(real):
    def step(self, window):
        time.sleep(float(os.environ["RUN_TINY_STEP_SECONDS"]))
        return real(self, window)
    return step


def limited_fit(real):
    def fit(self):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        limit = int(os.environ["RUN_TINY_FSIZE"])
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
        return real(self)
    return fit


def poisoned_step(real):
    def step(self, window):
        if self.position.step == 3:
            import minflux as mf

            mf.tree.leaves(self.model)[0][...] = float("nan")
        return real(self, window)
    return step


if __name__ == "__main__":  # only as a program: importing this file changes nothing
    sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[2])]
    import conftest
    import minflux_train.runs
    from minflux_train.__main__ import main
    from minflux_train.loop import Trainer

    minflux_train.runs.MODEL_BUILDERS["hmlstm"] = lambda cfg, vocab_size, **common: conftest.TinyLM(
        vocab_size, **common)
    if os.environ.get("RUN_TINY_STEP_SECONDS"):
        Trainer.train_step = slow_step(Trainer.train_step)
    if os.environ.get("RUN_TINY_PID_DIR"):
        Path(os.environ["RUN_TINY_PID_DIR"], f"rank{os.environ.get('PMI_RANK', '0')}.pid").write_text(
            str(os.getpid()))
    if os.environ.get("RUN_TINY_NAN_RANK", "none") == os.environ.get("PMI_RANK", "0"):
        Trainer.train_step = poisoned_step(Trainer.train_step)
    if os.environ.get("RUN_TINY_FSIZE"):
        Trainer.fit = limited_fit(Trainer.fit)
    sys.exit(main(sys.argv[1:]))
