"""The extender's schedule: an invocation every period (sub-minute allowed offline), one at a time.

EventBridge Scheduler's floor is one minute; offline any period goes, so scenarios stay short. The
stack gives the extender a reserved concurrency of 1, so invocations never overlap: one that runs
late starts as soon as the previous one ends. A pause (a fault) skips the runs that fall inside it,
as lost scheduled runs would be.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


class Scheduler(threading.Thread):
    """Calls `invoke` at `start + k * period_s` for k = 0, 1, ... until stopped."""

    def __init__(self, invoke: Callable[[], object], period_s: float, *, paused: Callable[[], bool]) -> None:
        super().__init__(name="extender-schedule", daemon=True)
        self.invoke = invoke
        self.period_s = period_s
        self.paused = paused
        self.stopped = threading.Event()
        self.runs = 0
        self.skipped = 0
        self.errors = 0

    def stop(self) -> None:
        """Ask the thread to end; `join()` waits for it."""
        self.stopped.set()

    def run(self) -> None:
        start = time.monotonic()
        slot = 0
        while not self.stopped.wait(max(0.0, start + slot * self.period_s - time.monotonic())):
            slot += 1
            if self.paused():
                self.skipped += 1
                continue
            self.runs += 1
            try:
                self.invoke()
            except Exception:
                self.errors += 1
                log.exception("extender invocation failed")
