"""No wall clock inside a seed: while one runs, the `time` module's clocks read the virtual clock in the
seed's thread, and every read is counted by caller, so a test can fail on any (the engine must read the
clock it is given). Other threads of the process keep the real clock.

`time.time`, `time.time_ns`, `time.monotonic`, `time.monotonic_ns`, `time.perf_counter` and
`time.perf_counter_ns` answer virtual time; `time.sleep` raises (nothing may wait on real time in a
seed). `datetime.datetime.now`/`utcnow` cannot be replaced on the C type; the engine does not call them
(a test greps for it). Code that bound a clock at import (`from time import time`) is not seen: none of
the engine does.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import SupportsIndex

CLOCKS = ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns")


class RealSleep(RuntimeError):
    """Something slept on real time inside a seed."""


@contextmanager
def virtual_time(now: Callable[[], float]) -> Iterator[Counter[str]]:
    """Point the `time` module's clocks at `now` for the block; yields the count of reads by caller
    (`module:function`)."""
    reads: Counter[str] = Counter()
    saved = {name: getattr(time, name) for name in (*CLOCKS, "sleep")}
    seed_thread = threading.get_ident()  # other threads of the process (a test runner's, py4j's) keep real time

    def caller() -> str:
        frame = sys._getframe(2)
        return f"{frame.f_globals.get('__name__', '?')}:{frame.f_code.co_name}"

    def virtual(name: str) -> Callable[[], float | int]:
        real = saved[name]

        def read() -> float | int:
            if threading.get_ident() != seed_thread:
                return real()  # type: ignore[no-any-return]
            reads[caller()] += 1
            return int(now() * 1e9) if name.endswith("_ns") else now()

        return read

    def sleep(seconds: float | SupportsIndex) -> None:
        if threading.get_ident() != seed_thread:
            saved["sleep"](seconds)
            return
        raise RealSleep(f"{caller()} slept {seconds} s of real time inside a seed")

    for name in CLOCKS:
        setattr(time, name, virtual(name))
    time.sleep = sleep
    try:
        yield reads
    finally:
        for name, original in saved.items():
            setattr(time, name, original)
