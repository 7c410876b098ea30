"""Live progress on the terminal: one line, refreshed each second (a new line every 10 s when the
output is not a terminal, so logs stay readable), and a line of its own for each event worth reading
at once: a delivery of a message while its job still ran, with the injected fault that excuses it, or a
Spark job's failure (`say`, from the worker's thread).

Each figure of the line says what it counts, with the report's meaning:
- `failed attempts`: leases released (a failed or stopped attempt, its message back to the queue);
- `faults injected`: calls answered by a fault, skipped or lost extender runs, and the timed faults;
- `redelivered while running`: deliveries of a message while one of its executions still ran its job,
  with how many an injected fault excuses;
- `lapses`: the rest, each a broken invariant (the report's `lapses`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from longjobs.offline.report import redelivery_verdicts

if TYPE_CHECKING:
    from longjobs.offline.faults import Faults
    from longjobs.offline.observe import Track


@dataclass(frozen=True)
class Counts:
    queued: int
    running: int
    done: int
    failed: int
    """Failed attempts: leases released."""
    dlq: int
    renewals: int
    faults: int
    """Faults injected so far, every mode."""
    redelivered: int
    """Deliveries while the message's job still ran."""
    excused: int
    """Of `redelivered`, those an injected fault explains."""
    lapses: int
    """Of `redelivered`, those no injected fault explains."""


def progress_line(elapsed_s: float, counts: Counts) -> str:
    """The live line: every figure named for what it counts."""
    return (
        f"[{elapsed_s:5.0f} s] queued {counts.queued}  running {counts.running}  done {counts.done}  "
        f"failed attempts {counts.failed}  dlq {counts.dlq}  renewals {counts.renewals}  "
        f"faults injected {counts.faults}  "
        f"redelivered while running {counts.redelivered} ({counts.excused} excused by a fault)  "
        f"lapses {counts.lapses}"
    )


class Progress:
    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty()
        self.every_s = every_s if every_s is not None else (1.0 if self.live else 10.0)
        self.clock = clock
        self._last: float | None = None
        self._width = 0
        self._writing = threading.Lock()  # `say` comes from the Spark worker's threads

    def update(self, elapsed_s: float, counts: Counts) -> None:
        """Show the counts, at most once per `every_s`."""
        now = self.clock()
        with self._writing:
            if self._last is not None and now - self._last < self.every_s:
                return
            self._last = now
            line = progress_line(elapsed_s, counts)
            if self.live:
                self.stream.write("\r" + line.ljust(self._width))
                self._width = len(line)
            else:
                self.stream.write(line + "\n")
            self.stream.flush()

    def note(self, elapsed_s: float, text: str) -> None:
        """A line of its own, at once, above the live line (which the next update draws again)."""
        self.say(f"[{elapsed_s:5.0f} s] {text}")

    def say(self, text: str) -> None:
        """`text` (one line or more), at once, above the live line (which the next update draws again)."""
        with self._writing:
            prefix = "\r" + " " * self._width + "\r" if self.live and self._width else ""
            self.stream.write(f"{prefix}{text}\n")
            self.stream.flush()
            if self.live:
                self._width = 0
                self._last = None  # the live line was wiped: draw it again on the next update

    def close(self) -> None:
        with self._writing:
            if self.live and self._width:
                self.stream.write("\n")
                self.stream.flush()


def live_counts(tracks: Iterable[Track], running: set[str], faults: Faults | None) -> Counts:
    """The console's counts now, from what the observer saw and the faults recorded so far (the same
    rules as the report's, so at the end the two agree)."""
    tracks = list(tracks)
    finals = [t.final for t in tracks]
    verdicts = [verdict for track in tracks for verdict in redelivery_verdicts(track, faults)]
    excused = sum(1 for verdict in verdicts if verdict.excuse is not None)
    return Counts(
        queued=sum(1 for t in tracks if t.final == "queued" and t.job_id not in running),
        running=len(running),
        done=finals.count("deleted"),
        failed=sum(t.released for t in tracks),
        dlq=finals.count("dlq"),
        renewals=sum(len(t.renewals) for t in tracks),
        faults=sum(faults.injected_by_mode().values()) if faults is not None else 0,
        redelivered=len(verdicts),
        excused=excused,
        lapses=len(verdicts) - excused,
    )


class RedeliveryNotes:
    """The console's line for each delivery of a message while its job ran, said once.

    One that an injected fault explains is said as soon as the fault's record explains it, with the
    excuse. One that no fault explains is said as a lapse only once `verdict_after_s` passed since the
    delivery (a fault still under way may yet explain it: an extender run is judged impaired when it
    ends), or when the run ends (`final`)."""

    def __init__(self, faults: Faults | None, *, origin: float, verdict_after_s: float) -> None:
        self.faults = faults
        self.origin = origin
        self.verdict_after_s = verdict_after_s
        self._said: set[tuple[str, float]] = set()

    def new(self, tracks: Iterable[Track], now: float, *, final: bool = False) -> list[str]:
        """The lines not said yet, in the order of the deliveries."""
        found: list[tuple[float, str]] = []
        for track in tracks:
            for verdict in redelivery_verdicts(track, self.faults):
                key = (track.job_id, verdict.at)
                if key in self._said:
                    continue
                when = f"{track.job_id} delivered at {verdict.at - self.origin:.1f} s while its job ran"
                if verdict.excuse is not None:
                    text = f"{when}: excused, {verdict.excuse}"
                elif final or now - verdict.at >= self.verdict_after_s:
                    text = f"{when}, and no injected fault explains it: a lapse"
                else:
                    continue
                self._said.add(key)
                found.append((verdict.at, text))
        return [text for _, text in sorted(found)]
