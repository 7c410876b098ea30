"""Delivery walk: which of the project's files one message's happy path enters, in order.

One `wait` job's message is received from the simulated SQS (`longjobs.sim.aws`) and handed, as an SQS
event, to the receiver's Lambda handler (`longjobs.functions.receiver.handler`), whose receiver the
factory builds on the simulated AWS. The handler writes the lease, starts the execution and defers the
message, as on AWS. A first message warms the container (its imports, its batch processor), so the walk
is the second message's, in a warm container: from the event to the call of StartExecution.

While the handler runs, a profile hook notes the file of each function called. Only the project's
files count (`longjobs/`, without the simulated AWS in `longjobs/sim/`); the standard library and
third-party packages (Powertools, botocore) are passed through, so a call from the handler into
Powertools and back is a stay in the handler's file.

Measures: `files` (distinct files entered), `stays` (the walk's length: calls in a row into one file
are one stay), `returns` (stays in a file the walk had already left).

Run from the repository root: `python -m benchmarks.delivery_walk [--json]`.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, cast

from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parent.parent
PACKAGE = REPO_ROOT / "longjobs"
HARNESS = PACKAGE / "sim"
REGION = "us-east-1"
ACCOUNT = "123456789012"
TABLE = "long-jobs-leases"
STATE_MACHINE_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:long-jobs"
SOURCE_ARN = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"


def project_file(filename: str) -> str | None:
    """`filename` relative to the repository when it is one of the project's files under walk."""
    path = Path(filename)
    if not path.is_relative_to(PACKAGE) or path.is_relative_to(HARNESS):
        return None
    return path.relative_to(REPO_ROOT).as_posix()


class Walk:
    """The project files the profiled code enters, one entry per stay."""

    def __init__(self, until: str) -> None:
        self.stays: list[str] = []
        self.until = until
        """The simulated AWS's method whose call ends the walk (`start_execution`)."""
        self.ended = False

    def _enter(self, frame: FrameType | None) -> None:
        name = project_file(frame.f_code.co_filename) if frame is not None else None
        if name is not None and (not self.stays or self.stays[-1] != name):
            self.stays.append(name)

    def hook(self, frame: FrameType, event: str, _: Any) -> None:
        if event != "call" or self.ended:
            return
        if frame.f_code.co_name == self.until and Path(frame.f_code.co_filename).is_relative_to(HARNESS):
            self.ended = True
            return
        self._enter(frame)

    def run(self, call: Callable[[], Any]) -> Any:
        sys.setprofile(self.hook)
        try:
            return call()
        finally:
            sys.setprofile(None)

    def summary(self) -> dict[str, Any]:
        left: set[str] = set()
        returns = 0
        for previous, current in itertools.pairwise(self.stays):
            left.add(previous)
            returns += current in left
        return {"files": len(set(self.stays)), "stays": len(self.stays), "returns": returns, "walk": self.stays}


def environment(queue_url: str, dlq_url: str) -> dict[str, str]:
    """The receiver's configuration, as the stack sets it."""
    return {
        "TABLE_NAME": TABLE,
        "QUEUE_URL": queue_url,
        "DLQ_URL": dlq_url,
        "STATE_MACHINE_ARN": STATE_MACHINE_ARN,
        "POWERTOOLS_SERVICE_NAME": "long-jobs",
        "POWERTOOLS_METRICS_NAMESPACE": "LongJobs",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
        "AWS_DEFAULT_REGION": REGION,
    }


def walk_delivery() -> dict[str, Any]:
    """The walk of one warm delivery through the receiver's handler."""
    from longjobs.engine.factory import Clients, Factory
    from longjobs.engine.lease import table_definition
    from longjobs.offline.lambdas import LambdaContext, load_function, sqs_event
    from longjobs.sim.aws import FakeAws
    from longjobs.sim.clock import FakeClock

    clock = FakeClock(1_800_000_000.0)
    aws = FakeAws(clock, random.Random(0), table=table_definition(TABLE), state_machine_arn=STATE_MACHINE_ARN)
    queue = aws.sqs.create_queue("jobs", visibility_timeout_s=30)
    dlq = aws.sqs.create_queue("jobs-dlq", visibility_timeout_s=30)
    os.environ.update(environment(queue.url, dlq.url))
    handler = load_function("longjobs.functions.receiver")
    built = Factory(handler.SETTINGS, clock).receiver(
        Clients(cast(Any, aws.sqs), cast(Any, aws.dynamodb), cast(Any, aws.stepfunctions)), random.Random(0)
    )
    setattr(handler, "receiver", lambda: built)  # noqa: B010  (the container's receiver, on the simulated AWS)

    def deliver(job_id: str) -> dict[str, Any]:
        body = json.dumps({"job_id": job_id, "type": "wait", "params": {"seconds": 600}})
        aws.sqs.send_message(QueueUrl=queue.url, MessageBody=body)
        messages = aws.sqs.receive_message(
            QueueUrl=queue.url, MaxNumberOfMessages=1, AttributeNames=["All"], MessageAttributeNames=["All"]
        )["Messages"]
        event = sqs_event(messages, source_arn=SOURCE_ARN, region=REGION)
        return {"event": event, "context": LambdaContext(function_name="receiver")}

    warm = deliver("warm-up")
    handler.handler(warm["event"], warm["context"])
    walk = Walk(until="start_execution")
    cold = deliver("walked")
    response = walk.run(lambda: handler.handler(cold["event"], cold["context"]))
    started = aws.calls["stepfunctions.StartExecution"]
    if started != 2 or len(response["batchItemFailures"]) != 1:  # the happy path: started, deferred
        raise AssertionError(f"not the happy path: {started} executions started, response {response}")
    return walk.summary()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.delivery_walk", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result = walk_delivery()
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    table = Table(title="One delivery, from the receiver's handler to StartExecution: the files it enters")
    for column in ("#", "file", "a return"):
        table.add_column(column)
    seen: set[str] = set()
    previous = None
    for index, name in enumerate(result["walk"], 1):
        table.add_row(str(index), name, "yes" if name in seen else "")
        if previous is not None:
            seen.add(previous)
        previous = name
    console = Console()
    console.print(table)
    console.print(f"files {result['files']}, stays {result['stays']}, returns {result['returns']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
