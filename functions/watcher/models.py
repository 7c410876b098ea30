"""The EventBridge event the watcher handles: "Step Functions Execution Status Change"."""

from __future__ import annotations

from typing import Literal

from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import BaseModel, Field

ENDED_UNSUCCESSFULLY = frozenset({"FAILED", "TIMED_OUT", "ABORTED"})
DETAIL_TYPE = "Step Functions Execution Status Change"


class ExecutionStatusChange(BaseModel):
    executionArn: str
    stateMachineArn: str
    name: str
    status: str
    error: str | None = None
    cause: str | None = None


class ExecutionStatusChangeEvent(EventBridgeModel):
    source: Literal["aws.states"]
    detail_type: Literal["Step Functions Execution Status Change"] = Field(alias="detail-type")
    detail: ExecutionStatusChange
