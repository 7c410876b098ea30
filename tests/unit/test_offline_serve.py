"""`longjobs-offline serve`: its settings file, and its stop (the first Ctrl-C or SIGTERM drains, a
second one skips the drain; the drain's waits run on a virtual clock)."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Any, cast

import pytest

from longjobs.offline import serve


class Clock:
    """Virtual time, and a `hurry` event whose wait moves it on (set after `hurried_at`, if given)."""

    def __init__(self, hurried_at: float | None = None) -> None:
        self.t = 0.0
        self.hurried_at = hurried_at

    def now(self) -> float:
        return self.t

    def wait(self, timeout: float) -> bool:
        if self.hurried_at is not None and self.t + timeout >= self.hurried_at:
            self.t = max(self.t, self.hurried_at)
            return True
        self.t += timeout
        return False


class Running:
    """A processor whose executions end at the given virtual times (never, for None)."""

    def __init__(self, clock: Clock, **ends: float | None) -> None:
        self.clock, self.ends = clock, ends

    def running_executions(self) -> set[str]:
        return {arn for arn, end in self.ends.items() if end is None or self.clock.t < end}


def drained(clock: Clock, processor: Running, drain_s: float) -> tuple[set[str], set[str]]:
    return serve.still_running(cast(Any, processor), drain_s, cast(Any, clock), now=clock.now)


def test_offline_serve_drain_waits_for_the_jobs_to_end_within_its_time() -> None:
    clock = Clock()
    assert drained(clock, Running(clock, a=3.0, b=4.2), drain_s=60) == ({"a", "b"}, set())
    assert clock.t == 4.5, "it looks every 0.5 s and ends once none runs"


def test_offline_serve_drain_leaves_what_still_runs_at_its_end() -> None:
    clock = Clock()
    assert drained(clock, Running(clock, a=3.0, b=None), drain_s=60) == ({"a", "b"}, {"b"})
    assert clock.t == 60


def test_offline_serve_drain_ends_when_hurried() -> None:
    clock = Clock(hurried_at=7.0)
    assert drained(clock, Running(clock, a=None), drain_s=600) == ({"a"}, {"a"})
    assert clock.t == 7.0, "a second signal does not wait out the drain"


def test_offline_serve_second_signal_hurries_the_drain() -> None:
    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        hurry = threading.Event()
        stop = serve._on_signals(hurry)
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        handler(signal.SIGTERM, None)
        assert stop.is_set() and not hurry.is_set(), "the first signal stops and drains"
        handler(signal.SIGINT, None)
        assert hurry.is_set(), "the second one skips the drain"
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def test_offline_serve_settings_refuse_what_the_service_sets_itself(tmp_path: Path) -> None:
    """The queues, the table and the state machine are the local service's own: a settings file naming
    them is refused, never silently replaced."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"max_attempts": 2, "queue_url": "https://x", "waiting_queues": "{}"}))

    with pytest.raises(serve.ServeError, match="queue_url, waiting_queues: set by the local service"):
        serve.serve_settings(path)

    path.write_text(json.dumps({"max_attempts": 2}))
    assert serve.serve_settings(path).max_attempts == 2


def test_offline_serve_settings_unknown_key_names_the_file_and_the_nearest(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"extender_period": 2}))

    with pytest.raises(serve.ServeError) as raised:
        serve.serve_settings(path)
    assert str(raised.value) == f"{path}: extender_period: no such setting (did you mean extender_period_s?)"


def test_offline_serve_settings_blame_the_files_setting_not_the_services(tmp_path: Path) -> None:
    """A longer period no longer fits the service's own 30 s chunk ceiling: the error leads with the
    file's setting, and says to set the ceiling in the file too (or change the period)."""
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"extender_period_s": 120}))

    with pytest.raises(serve.ServeError) as raised:
        serve.serve_settings(path)
    text = str(raised.value)
    assert text.startswith(
        f"{path}: extender_period_s=120 does not fit the service's own adaptive_ceiling_s=30, which the file leaves "
        "unset: adaptive_ceiling_s=30 is outside 736..43140: "
    )
    assert text.endswith(
        "smallest safe adaptive_ceiling_s: 736; set adaptive_ceiling_s in the file too, or change extender_period_s"
    )

    path.write_text(json.dumps({"adaptive_ceiling_s": 5}))  # the file's own value refused: no one else to blame
    with pytest.raises(serve.ServeError, match=rf"^{path}: adaptive_ceiling_s=5 is outside 7\.\.43140: "):
        serve.serve_settings(path)

    path.write_text(json.dumps({"extender_period_s": 120, "adaptive_ceiling_s": 736}))
    assert serve.serve_settings(path).extender_period_s == 120


def test_offline_serve_java_is_looked_for_where_spark_looks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark's launcher runs `$JAVA_HOME/bin/java` when JAVA_HOME is set: one without it is named, even with
    a `java` on the PATH, in the one check `run` and `demo` make too (`longjobs.offline.programs`)."""
    monkeypatch.setattr(serve, "has_pyspark", lambda: True)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)  # no jobs.json: the built-in types, `spark` among them
    catalog = serve.serve_catalog(None)

    with pytest.raises(serve.ServeError, match=rf"^java not found: JAVA_HOME is {tmp_path}, which has no bin/java"):
        serve.check_java(catalog)
