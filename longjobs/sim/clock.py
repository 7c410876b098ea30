"""A manual clock for tests and benchmarks that run the engine outside the scheduler: the engine's `Clock`,
read and advanced by hand. The simulation's own clock is the scheduler's (`longjobs.sim.scheduler.VirtualClock`)."""

from __future__ import annotations

import threading


class FakeClock:
    """A manual clock for tests and simulations: `sleep` advances time instantly.

    Thread-safe so that overlapping extender runs in tests can share it.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)
