"""The extender's schedule: an invocation every period (sub-minute allowed offline), one at a time.

EventBridge Scheduler's floor is one minute; offline any period goes, so scenarios stay short. The
stack gives the extender a reserved concurrency of 1, so invocations never overlap: one that runs
late starts as soon as the previous one ends. Faults may skip a run (`skip` names why: a pause, or a
lost scheduled run), and an invocation may die (`InvocationCrashed`): that run failed, the next one
comes at its time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable

from longjobs.offline.lambdas import InvocationCrashed

log = logging.getLogger(__name__)


class Scheduler(threading.Thread):
    """Calls `invoke` at `start + k * period_s` for k = 0, 1, ... until stopped.

    `clock` (monotonic seconds) and `wait` (wait up to that many seconds; True once stopped) default to
    the real ones; a test passes a fake pair."""

    def __init__(
        self,
        invoke: Callable[[], object],
        period_s: float,
        *,
        skip: Callable[[], str | None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
        wait: Callable[[float], bool] | None = None,
    ) -> None:
        super().__init__(name="extender-schedule", daemon=True)
        self.invoke = invoke
        self.period_s = period_s
        self.skip = skip
        self.clock = clock
        self.stopped = threading.Event()
        self.wait = wait or self.stopped.wait
        self.runs = 0
        self.skipped: Counter[str] = Counter()
        self.errors = 0
        self.crashes = 0

    def stop(self) -> None:
        """Ask the thread to end; `join()` waits for it."""
        self.stopped.set()

    def run(self) -> None:
        start = self.clock()
        slot = 0
        while not self.wait(max(0.0, start + slot * self.period_s - self.clock())):
            slot += 1
            reason = self.skip()
            if reason is not None:
                self.skipped[reason] += 1
                continue
            self.runs += 1
            try:
                self.invoke()
            except InvocationCrashed as crash:
                self.crashes += 1
                log.error("extender invocation died: %s", crash)
            except Exception:
                self.errors += 1
                log.exception("extender invocation failed")
