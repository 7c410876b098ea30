"""Edges of the operator's commands: `dlq redrive`'s twins (copies of one message, the same `OriginalMessageId`
and body) with bodies that differ, failed sends and filters, its dry run, and the times `lease --json` and
`status` read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from longjobs.cli import catalog, clients, render, resources
from longjobs.cli.dlq import DeadLetter, RedriveFilter, copy_messages, preview, redrive
from longjobs.engine.lease import Lease, LeaseStatus
from tests.unit.test_cli_dlq import SlowSqs, Ticking, _dead_letter_twice, body, copy_run, queues


def _attributes(original: str, error_type: str = "AttemptsExhausted") -> dict[str, Any]:
    return {
        "ErrorType": {"DataType": "String", "StringValue": error_type},
        "OriginalMessageId": {"DataType": "String", "StringValue": original},
    }


class Paced(SlowSqs):
    """The simulated SQS where the n-th receive first moves the clock by `delays[n]` (0 past the list): with
    messages made visible one at a time (`DelaySeconds`), each page holds one known message."""

    def __init__(self, *args: Any, delays: list[float], fail_bodies: set[str] = frozenset(), **kwargs: Any) -> None:  # type: ignore[assignment]
        super().__init__(*args, **kwargs)
        self.delays = delays
        self.receives = 0
        self.fail_bodies = set(fail_bodies)

    def receive_message(self, **kwargs: Any) -> Any:
        self._clock.t += self.delays[self.receives] if self.receives < len(self.delays) else 0.0
        self.receives += 1
        return self._sqs.receive_message(**kwargs)

    def send_message(self, **kwargs: Any) -> Any:
        if kwargs["MessageBody"] in self.fail_bodies:  # lands, then answers a 500
            self.fail_bodies.discard(kwargs["MessageBody"])
            self.fail_first = True
        return SlowSqs.send_message(self, **kwargs)


def _left(aws: Any, dlq: str) -> list[Any]:
    return [m for m in aws.sqs.queues[dlq].messages.values() if not m.deleted]


# --- dry run vs the move-task path ---------------------------------------------------------------------------------


def test_cli_dlq_redrive_dry_run_of_everything_lists_every_twin_the_move_task_moves() -> None:
    """`dlq redrive --include-poison` with no filter goes by SQS's move task on AWS, which moves both of two
    twins (operate.md). Its dry run lists both, rather than tell the operator the job runs once."""
    aws, _clock, dlq, jobs = queues(0, step_s=0.0)
    _dead_letter_twice(aws, dlq, "original-1", index=7)
    everything = RedriveFilter(include_poison=True)
    aws.sqs.queues[jobs].redrive = (aws.sqs.queues[dlq], 5)  # the stack's redrive policy: the DLQ is its DLQ

    shown = redrive(aws.sqs, dlq, jobs, dry_run=True, select=everything)  # type: ignore[arg-type]
    done = redrive(aws.sqs, dlq, jobs, select=everything)  # type: ignore[arg-type]
    assert done.method == "move-task", done
    task = aws.sqs.move_tasks[-1]
    while aws.sqs.move_one(task):
        pass
    moved = [m for m in aws.sqs.queues[jobs].messages.values() if m.body == body(7)]

    assert len(moved) == 2  # the move task moved both twins, as documented
    assert (len(shown.messages), shown.duplicates) == (len(moved), 0), (
        f"the dry run showed {len(shown.messages)} moving and {shown.duplicates} twin(s) deleted; "
        f"the run it previews moved {len(moved)} copies of one job"
    )


# --- twins are told by body under one original id ----------------------------------------------------------------


def test_cli_dlq_redrive_tells_twins_by_body_under_one_original_id() -> None:
    """Three DLQ messages under one OriginalMessageId: A and C the same body (twins), B another body (a cancel's
    copy re-serializes the job from its execution's input). A and B are sent; C, A's twin, is not."""
    aws, clock, dlq, jobs = queues(0, step_s=0.0)
    other = body(7).replace(", ", ",")  # the same job, serialized otherwise
    aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=_attributes("o-1"))
    aws.sqs.send_message(QueueUrl=dlq, MessageBody=other, MessageAttributes=_attributes("o-1"), DelaySeconds=2)
    aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=_attributes("o-1"), DelaySeconds=4)
    sqs = Paced(aws, clock, delays=[0.0, 2.0, 2.0])

    result = copy_messages(sqs, dlq, jobs, clock=clock.now, sleep=clock.sleep)  # type: ignore[arg-type]

    assert sqs.sent[body(7)] == 1, f"A and its byte-identical twin C were both sent: {result}"


def test_cli_dlq_redrive_deletes_a_passed_over_twin_when_another_body_of_its_original_failed() -> None:
    """--message-id A B: the operator names A and B (same OriginalMessageId, bodies differ). P, A's twin,
    is passed over first; A is sent; B's send fails.
    At the run's end P is not deleted (the check asks `tried.get(original) == (P's body, True)`), though the
    run reported A moved: the next default redrive sends P and A's job runs twice."""
    aws, clock, dlq, jobs = queues(0, step_s=0.0)
    other = body(7).replace(", ", ",")
    aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=_attributes("o-1"))  # P
    a = aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=_attributes("o-1"), DelaySeconds=2)[
        "MessageId"
    ]
    b = aws.sqs.send_message(QueueUrl=dlq, MessageBody=other, MessageAttributes=_attributes("o-1"), DelaySeconds=4)[
        "MessageId"
    ]
    sqs = Paced(aws, clock, delays=[0.0, 2.0, 2.0], fail_bodies={other})

    one = copy_run(sqs, clock, dlq, jobs, RedriveFilter(message_ids=frozenset({a, b})))
    clock.t += 3_600
    rest = copy_messages(sqs, dlq, jobs, clock=clock.now, sleep=clock.sleep)  # type: ignore[arg-type]

    assert sqs.sent[body(7)] == 1, f"A's job sent {sqs.sent[body(7)]} times: {one} then {rest}"


# --- counts cover every message seen ---------------------------------------------------------------------------


@pytest.mark.parametrize("twin_first", [True, False], ids=["twin-met-first", "twin-met-after"])
def test_cli_dlq_redrive_counts_an_unselected_twin_of_a_failed_send(twin_first: bool) -> None:
    """--message-id names A; A's send fails; its twin T (not selected) stays in the DLQ, counted `skipped`
    whichever the run meets first, so the report's counts cover every message it saw."""
    aws, clock, dlq, jobs = queues(0, step_s=0.0)
    first = aws.sqs.send_message(QueueUrl=dlq, MessageBody=body(7), MessageAttributes=_attributes("o-1"))["MessageId"]
    second = aws.sqs.send_message(
        QueueUrl=dlq, MessageBody=body(7), MessageAttributes=_attributes("o-1"), DelaySeconds=2
    )["MessageId"]
    chosen = second if twin_first else first
    sqs = Paced(aws, clock, delays=[0.0, 2.0], fail_bodies={body(7)})

    result = copy_run(sqs, clock, dlq, jobs, RedriveFilter(message_ids=frozenset({chosen})))

    assert result.failed == 1 and len(_left(aws, dlq)) == 2, result
    counted = (result.moved or 0) + result.skipped + result.kept + result.duplicates + result.failed + result.came_back
    assert (counted, result.skipped) == (2, 1), f"2 messages seen, {counted} counted: {result}"


# --- the dry run on a large DLQ ----------------------------------------------------------------------------------


def test_cli_dlq_redrive_dry_run_is_linear_in_the_dlq() -> None:
    """A DLQ may hold 100,000 messages: the dry run compares each letter a bounded number of times (counted,
    not timed), where a list search per letter would take minutes beyond the listing."""
    calls = 0

    class Counted(DeadLetter):
        def __eq__(self, other: object) -> bool:
            nonlocal calls
            calls += 1
            return self is other

        __hash__ = object.__hash__

    n = 2_000
    letters = [Counted(f"m{i}", "AttemptsExhausted", "x", 3, f"o{i}", 1.0, body(i)) for i in range(n)]
    preview(letters, RedriveFilter())  # type: ignore[arg-type]

    assert calls <= 10 * n, f"{calls} comparisons for {n} letters (~n²/2)"


# --- lease --json prints every time as ISO 8601 -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["checked_at", "waiting_since", "copy_sent_at", "claimed_at", "claim_kept_until"])
def test_cli_lease_json_prints_every_time_as_iso(name: str) -> None:
    """operate.md: "`--json` prints ... every field of the lease record. Times are ISO 8601 in UTC." """
    now = 1_800_000_000.0
    lease = Lease(
        message_id="m-1",
        queue_url="https://sqs/q",
        receipt_handle="h",
        receive_count=1,
        received_at=now,
        visible_until=now,
        renew_until=now,
        status=LeaseStatus.WAITING,
        **{name: now},  # type: ignore[arg-type]
    )

    assert render.lease_json(lease)[name] == render.iso(now), render.lease_json(lease)[name]


_ = Ticking  # imported for the helpers' types


# --- status reads odd close times as none -----------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, {"at": "x"}], ids=["bool", "map"])
def test_cli_status_survives_an_odd_close_time(value: Any) -> None:
    """An item with an odd close time (a hand edit, another writer: a BOOL or a map) is not counted, and
    `longjobs status` goes on."""
    from longjobs.cli.status import last_hour_from_table

    items = [{"pk": "m-1", "status": "LOST", "workflow_closed_at": value}]

    assert last_hour_from_table(items, now=1_800_000_000.0).leases_lost == 0


@pytest.mark.parametrize(
    ("origin", "advice", "not_said"),
    [
        ("stack LongJobs", "deploy it again", "banner"),
        ("local service at http://127.0.0.1:4566", "try again after its banner", "deploy"),
    ],
)
def test_cli_catalog_missing_job_types_advice_fits_where_they_come_from(
    origin: str, advice: str, not_said: str
) -> None:
    """A stack publishes its job types on deploy; the local service once it has started. A command sent
    before the service's banner is told to wait for it, not to deploy a stack there is none of."""
    said = catalog.not_published(origin, "leases")

    assert said.startswith(f"{origin} publishes no job types") and advice in said and not_said not in said, said
    assert said.endswith("or pass --jobs-file FILE")


@pytest.mark.parametrize(
    ("outputs", "service"),
    [
        ({"MetricsService": "LongJobs-prod"}, "LongJobs-prod"),
        ({}, None),  # a stack of one's own without the output: `status` reads `long-jobs` and says so
    ],
)
def test_cli_resources_metrics_service_from_the_stacks_output(outputs: dict[str, str], service: str | None) -> None:
    class Deployed:
        def describe_stacks(self, StackName: str) -> dict[str, Any]:  # boto3's keyword
            named = {"QueueUrl": "q", "DeadLetterQueueUrl": "d", "LeaseTableName": "t", "StateMachineArn": "s"}
            listed = [{"OutputKey": key, "OutputValue": value} for key, value in {**named, **outputs}.items()]
            return {"Stacks": [{"StackName": StackName, "StackStatus": "UPDATE_COMPLETE", "Outputs": listed}]}

    assert resources.from_stack(Deployed(), "Data").metrics_service == service  # type: ignore[arg-type]


def test_cli_session_region_from_aws_region_variable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """On a stack the region comes from where the AWS CLI finds it, and the missing-region error tells the
    user to set `AWS_REGION`: the AWS CLI v2 and the other SDKs read it before `AWS_DEFAULT_REGION`, which
    is all botocore reads on its own."""
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")

    assert clients.make_session(clients.Connection()).region_name == "eu-west-1"
    assert clients.make_session(clients.Connection(region="ap-south-1")).region_name == "ap-south-1"
    monkeypatch.delenv("AWS_REGION")
    assert clients.make_session(clients.Connection()).region_name == "us-west-2"
