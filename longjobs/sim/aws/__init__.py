"""An in-process AWS for simulations on a virtual clock: SQS, DynamoDB and Step Functions, answered by
Python objects that take the boto3 clients' methods and arguments and raise botocore's `ClientError`
with the codes AWS sends. No network, no serialization: only the semantics the processor relies on.

- **SQS** (`FakeSqs`): standard queues with a visibility timeout, a receive count and a new receipt
  handle per receive, SQS's 12 h limit per receive, delays, redrive to a dead-letter queue after
  `maxReceiveCount` receives, and the errors of a visibility change by a stale handle
  (`InvalidParameterValue`, "expired"), of a message not in flight (`MessageNotInflight`) and of the 12 h
  limit ("beyond the limit"). A delete by a handle SQS issued earlier succeeds (an older receive's leaves
  the message in place, "might not be deleted"); only a handle never issued is `ReceiptHandleIsInvalid`.
  A receive takes messages at random among the visible ones (SQS's standard queues promise no order).
- **DynamoDB** (`FakeDynamoDb`): items, conditional writes (`ConditionExpression`), update expressions
  (SET with `+`/`-` on the item as it was before the update, REMOVE), transactions (cancelled with
  per-item reasons; two actions on one item refused), `BatchGetItem`, and queries of the table's global
  secondary indexes (sorted by their range key, `Limit` before the filter, `Select=COUNT`), which may lag
  the table (`IndexLag`: a write reaches them after a seeded delay, as AWS propagates it). Requests are
  validated as DynamoDB does (`ValidationException`): placeholders defined and used, no update of the key,
  no arithmetic on an absent attribute. The expressions are parsed by a small parser of DynamoDB's
  grammar, the part the processor writes.
- **Step Functions** (`FakeStepFunctions`): executions by name (a second start of a name with the same
  input is the same execution), `DescribeExecution`, `StopExecution` and `ListExecutions` (paged, newest
  first, by status), which may lag (`ListLag`: an execution shows in the list, and its end shows, after a
  seeded delay; AWS calls the list eventually consistent), and `GetExecutionHistory` (the events the
  world records, paged). What an execution does is the simulation's (a `Workflow` callback), through these
  same fakes.

Every request is counted by service and operation (`Counter` in `FakeAws.calls`).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

from longjobs.engine.clock import Clock
from longjobs.sim.aws.base import ACCOUNT, REGION, SQS_MAX_VISIBILITY_S, client_error
from longjobs.sim.aws.dynamodb import FakeDynamoDb, IndexLag
from longjobs.sim.aws.queue import FakeQueue, Message
from longjobs.sim.aws.sqs import FakeSqs
from longjobs.sim.aws.stepfunctions import Execution, FakeStepFunctions, ListLag

__all__ = [
    "ACCOUNT",
    "REGION",
    "SQS_MAX_VISIBILITY_S",
    "Execution",
    "FakeAws",
    "FakeDynamoDb",
    "FakeQueue",
    "FakeSqs",
    "FakeStepFunctions",
    "ListLag",
    "Message",
    "client_error",
]


class FakeAws:
    """The three services on one clock, with one request counter."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        *,
        table: Mapping[str, Any],
        state_machine_arn: str,
        index_lag: IndexLag | None = None,
        list_lag: ListLag | None = None,
        describe_lag: ListLag | None = None,
    ) -> None:
        """`index_lag`: how long a write takes to reach the table's indexes (none: at once); `list_lag`:
        how long ListExecutions takes to show an execution's start and end (none: at once); `describe_lag`:
        how long DescribeExecution takes to find a new execution (none: at once)."""
        self.clock = clock
        self.rng = rng
        self.calls: Counter[str] = Counter()
        self.receives = 0  # messages handed out by ReceiveMessage
        self.sqs = FakeSqs(self)
        self.dynamodb = FakeDynamoDb(self, table, index_lag=index_lag)
        self.stepfunctions = FakeStepFunctions(self, state_machine_arn, list_lag=list_lag, describe_lag=describe_lag)

    @property
    def requests(self) -> int:
        return sum(self.calls.values())
