"""Stopping a run cleanly on SIGINT or SIGTERM: finish the step, save, stop; a second Ctrl-C aborts."""
from __future__ import annotations

import contextlib
import logging
import signal
import threading

log = logging.getLogger(__name__)


class StopFlag:
    """Set by SIGINT / SIGTERM while `installed`; a second Ctrl-C interrupts at once.

    >>> flag = StopFlag()
    >>> with flag.installed():
    ...     flag.reason is None
    True
    """

    def __init__(self):
        self.reason = None

    @contextlib.contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

        def handler(signum, frame):
            if self.reason is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self.reason = signal.Signals(signum).name
            log.warning("%s received: finishing this step, saving a checkpoint and stopping "
                        "(Ctrl-C again to abort without saving)", self.reason)

        for s in previous:
            signal.signal(s, handler)
        try:
            yield self
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
