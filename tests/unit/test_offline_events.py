"""Status events for the watcher: EventBridge's shape, one per watched end, late, dropped by the fault, and
retried twice when the watcher's invocation fails (on a fake clock and a stand-in Step Functions)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from longjobs.engine.watcher.models import ExecutionStatusChangeEvent
from longjobs.offline.events import StatusEvents, status_change_event
from longjobs.offline.faults import Faults
from longjobs.offline.lambdas import InvocationCrashed
from longjobs.offline.scenario import parse_scenario

STATE_MACHINE = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"
WATCHED = ("FAILED", "TIMED_OUT", "ABORTED")


def execution(name: str, status: str, **extra: Any) -> dict[str, Any]:
    return {
        "executionArn": f"arn:aws:states:us-east-1:123456789012:execution:long-jobs:{name}",
        "stateMachineArn": STATE_MACHINE,
        "name": name,
        "status": status,
        "startDate": datetime(2026, 11, 22, 10, 0, tzinfo=UTC),
        "stopDate": None if status == "RUNNING" else datetime(2026, 11, 22, 10, 1, tzinfo=UTC),
        "input": "{}",
        **extra,
    }


class FakeStepFunctions:
    def __init__(self, *executions: dict[str, Any]) -> None:
        self.executions = list(executions)

    def get_paginator(self, name: str) -> FakeStepFunctions:
        assert name == "list_executions"
        return self

    def paginate(self, stateMachineArn: str) -> list[dict[str, Any]]:
        assert stateMachineArn == STATE_MACHINE
        return [{"executions": [{k: e[k] for k in ("executionArn", "name", "status")} for e in self.executions]}]

    def describe_execution(self, executionArn: str) -> dict[str, Any]:
        return next(e for e in self.executions if e["executionArn"] == executionArn)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def faults(*extra: dict[str, Any], seed: int = 1) -> Faults:
    return Faults(
        parse_scenario({"jobs": [{"id": "a", "type": "wait", "seconds": 1}], "faults": list(extra), "seed": seed})
    )


def events(sfn: FakeStepFunctions, made: Faults, deliver: Any) -> tuple[StatusEvents, Clock]:
    clock = Clock()
    return StatusEvents(sfn, STATE_MACHINE, deliver, made, statuses=WATCHED, clock=clock), clock  # type: ignore[arg-type]


def test_status_change_event_is_what_the_watcher_parses() -> None:
    event = status_change_event(execution("m-1", "FAILED", error="WaitJobFailed", cause="asked to fail"))

    parsed = ExecutionStatusChangeEvent.model_validate(event)

    assert (parsed.source, parsed.detail_type, parsed.account, parsed.region) == (
        "aws.states",
        "Step Functions Execution Status Change",
        "123456789012",
        "us-east-1",
    )
    assert (parsed.detail.name, parsed.detail.status, parsed.detail.error) == ("m-1", "FAILED", "WaitJobFailed")
    assert event["detail"]["stopDate"] - event["detail"]["startDate"] == 60_000
    assert event["time"] == "2026-11-22T10:01:00Z"


def test_status_events_delivered_once_per_watched_end_after_a_delay() -> None:
    sfn = FakeStepFunctions(
        execution("m-1", "RUNNING"),
        execution("m-2", "SUCCEEDED"),
        execution("m-3", "ABORTED"),
        execution("m-4", "FAILED"),
    )
    delivered: list[str] = []
    watcher, clock = events(sfn, faults(), lambda event: delivered.append(event["detail"]["name"]))

    watcher.notice()
    watcher.deliver_due()
    assert delivered == [], "EventBridge is a little late"
    clock.now = 1.6
    watcher.deliver_due()
    watcher.notice()
    clock.now = 5
    watcher.deliver_due()

    assert sorted(delivered) == ["m-3", "m-4"]
    sfn.executions[0] = execution("m-1", "TIMED_OUT")
    watcher.notice()
    clock.now = 7
    watcher.deliver_due()
    assert sorted(delivered) == ["m-1", "m-3", "m-4"]
    assert watcher.delivered == 3


def test_status_events_dropped_by_the_fault() -> None:
    sfn = FakeStepFunctions(execution("m-1", "ABORTED"), execution("m-2", "FAILED"))
    made = faults({"type": "drop_status_events", "probability": 1.0})
    delivered: list[dict[str, Any]] = []
    watcher, clock = events(sfn, made, delivered.append)

    watcher.notice()
    clock.now = 5
    watcher.deliver_due()

    assert (delivered, watcher.dropped, made.injected_by_mode()) == ([], 2, {"event_lost": 2})
    assert made.faults_missed() == []


@pytest.mark.parametrize("failure", [RuntimeError("SettleError"), InvocationCrashed("killed at UpdateItem")])
def test_status_event_retried_twice_when_the_watcher_fails(failure: BaseException) -> None:
    sfn = FakeStepFunctions(execution("m-1", "ABORTED"))
    attempts: list[float] = []

    def deliver(event: dict[str, Any]) -> None:
        attempts.append(clock.now)
        raise failure

    watcher, clock = events(sfn, faults(), deliver)
    watcher.notice()
    for now in (2, 3, 4, 5, 6):
        clock.now = now
        watcher.deliver_due()

    assert attempts == [2, 3, 4], "the first try and two retries, a (compressed) delay apart"
    assert (watcher.failed, watcher.given_up, watcher.pending) == (3, 1, 0)
