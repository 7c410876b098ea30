"""Live progress on the terminal: one line, refreshed each second (a new line every 10 s when the
output is not a terminal, so logs stay readable)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import TextIO


@dataclass(frozen=True)
class Counts:
    queued: int
    running: int
    done: int
    failed: int
    dlq: int
    renewals: int
    lapses: int


class Progress:
    def __init__(self, stream: TextIO | None = None, *, every_s: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.every_s = every_s if every_s is not None else (1.0 if self.live else 10.0)
        self._last = 0.0
        self._width = 0

    def update(self, elapsed_s: float, counts: Counts) -> None:
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        line = (
            f"[{elapsed_s:5.0f} s] queued {counts.queued}  running {counts.running}  done {counts.done}  "
            f"failed attempts {counts.failed}  dlq {counts.dlq}  renewals {counts.renewals}  lapses {counts.lapses}"
        )
        if self.live:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.live and self._width:
            self.stream.write("\n")
            self.stream.flush()
