"""The trace of one seed: every AWS call and every event of the world, in order, as JSON lines.

Each line is one object with the virtual time `t` (seconds since the seed's start, to the microsecond),
the `actor`, and either a `call` (service.Operation, its `params`, and its `answer`, `error` or `fault`)
or an `event` (what the world did: a delivery, an execution's start or end, a job's run). The same seed
on the same commit writes the same bytes; `longjobs.history.checker` re-checks the promise from it alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, TextIO


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, sort_keys=True, default=str, separators=(",", ":"))


class Trace:
    """An in-memory list of trace records, written out on request."""

    def __init__(self, clock: Callable[[], float], start: float, *, keep_calls: bool = True) -> None:
        self._clock = clock
        self._start = start
        self.keep_calls = keep_calls
        self.records: list[str] = []  # serialized when recorded: a dict the code mutates later stays as it was

    def _at(self) -> float:
        return round(self._clock() - self._start, 6)

    def call(
        self,
        actor: str,
        service: str,
        operation: str,
        params: dict[str, Any],
        *,
        answer: Any = None,
        error: str | None = None,
        fault: Any = None,
    ) -> None:
        if not self.keep_calls:
            return
        record: dict[str, Any] = {"t": self._at(), "actor": actor, "call": f"{service}.{operation}", "params": params}
        if error is not None:
            record["error"] = error
        elif (answer is not None and fault is None) or (
            fault is not None and str(fault) in ("answer_lost", "crash_after")
        ):
            record["answer"] = answer
        if fault is not None:
            record["fault"] = str(fault)
        self.records.append(_line(record))

    def event(self, actor: str, event: str, **details: Any) -> None:
        self.records.append(_line({"t": self._at(), "actor": actor, "event": event, **details}))

    def write(self, out: TextIO) -> None:
        for line in self.records:
            out.write(line + "\n")
