"""The EventBridge event the watcher handles: "Step Functions Execution Status Change".

The envelope's fields are declared here rather than taken from Powertools' `EventBridgeModel`:
importing the Powertools parser imports every event model it has (about 100 ms of cold start).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from longjobs.engine.lease.lock import Hold

ENDED_UNSUCCESSFULLY = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})
ENDED = ENDED_UNSUCCESSFULLY | {"SUCCEEDED"}
"""Ends the watcher hears of: the unsuccessful ones to release, every one to admit into the slot it freed."""
DETAIL_TYPE = "Step Functions Execution Status Change"


class ExecutionStatusChange(BaseModel):
    executionArn: str
    stateMachineArn: str
    name: str
    status: str
    error: str | None = None
    cause: str | None = None
    input: str | None = None
    """The execution's input as JSON text (EventBridge leaves it null when it is too large to include)."""
    output: str | None = None
    """A success's output as JSON text: the workflow's `$.outcome`, `{"summary": <the job's run>}`."""
    startDate: int | None = None
    """When the execution started, in milliseconds since the epoch."""
    stopDate: int | None = None
    """When it stopped (null while it runs), in milliseconds since the epoch."""

    def freed_slot(self) -> Hold | None:
        """The admission slot the execution held (its input's `slot`, as the receiver starts it), with how
        long it ran (its start to its stop), if the event carries them."""
        try:
            slot = json.loads(self.input or "").get("slot")
        except (ValueError, AttributeError):
            return None
        if not isinstance(slot, str) or not slot:
            return None
        ran = (self.stopDate - self.startDate) / 1000 if self.startDate and self.stopDate else None
        return Hold(slot, last_duration_s=max(0.0, ran) if ran is not None else None)

    def run_outcome(self) -> dict[str, Any] | None:
        """What the job's run reported on success (the output's `summary`), if the event carries it."""
        return run_outcome(self.output)

    def job_type(self) -> str | None:
        """The job type named by the execution's input (`job.type`, as the receiver starts it), if the
        event carries it."""
        try:
            job = json.loads(self.input or "").get("job")
        except (ValueError, AttributeError):
            return None
        job_type = job.get("type") if isinstance(job, dict) else None
        return job_type if isinstance(job_type, str) and job_type else None


def run_outcome(output: str | None) -> dict[str, Any] | None:
    """What a job's run reported, from its execution's output (the workflow's `$.outcome`:
    `{"summary": ...}`); None when there is no such object."""
    try:
        summary = json.loads(output or "").get("summary")
    except (ValueError, AttributeError):
        return None
    return summary if isinstance(summary, dict) else None


def status_change_envelope(
    detail: dict[str, Any], *, event_id: str, at: datetime, account: str, region: str
) -> dict[str, Any]:
    """The EventBridge event around an execution's `detail`, with the fields EventBridge always sends
    (https://docs.aws.amazon.com/step-functions/latest/dg/eventbridge-integration.html): what the offline
    runtime and the simulation deliver to the watcher."""
    return {
        "version": "0",
        "id": event_id,
        "detail-type": DETAIL_TYPE,
        "source": "aws.states",
        "account": account,
        "time": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [detail["executionArn"]],
        "detail": detail,
    }


class ExecutionStatusChangeEvent(BaseModel):
    """An EventBridge event (the fields EventBridge always sends) of a Step Functions status change."""

    model_config = ConfigDict(populate_by_name=True)

    version: str
    id: str
    account: str
    time: datetime
    region: str
    resources: list[str]
    source: Literal["aws.states"]
    detail_type: Literal["Step Functions Execution Status Change"] = Field(alias="detail-type")
    detail: ExecutionStatusChange
