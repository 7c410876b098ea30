"""`longjobs cancel`, `top`, and the confirmation of writes, against the local service (moto's server over
HTTP); and which AWS operations the read-only commands call (never ReceiveMessage)."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest

from longjobs.cli import clients, confirm
from longjobs.engine import cancel
from longjobs.engine.jobs.published import CATALOG_KEY
from longjobs.engine.lease import LeaseStatus
from tests.functional import test_cli_local as served
from tests.longjobs_support import Processor, assert_one_line_error, run

endpoint, local, wide_terminal = served.endpoint, served.local, served._wide_terminal  # their fixtures

JOB_TYPES = {
    "job_types": [
        {
            "name": "backfill",
            "runner": "wait",
            "max_concurrency": 2,
            "params_schema": {
                "type": "object",
                "required": ["seconds"],
                "properties": {"seconds": {"type": "integer", "minimum": 0}},
            },
        }
    ]
}


@pytest.fixture
def no_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(confirm, "is_terminal", lambda: False)


def terminal_answering(monkeypatch: pytest.MonkeyPatch, answer: str) -> list[str]:
    """A terminal on which the user types `answer`; returns the questions asked."""
    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return answer

    monkeypatch.setattr(confirm, "is_terminal", lambda: True)
    monkeypatch.setattr(confirm, "ask", ask)
    return asked


def waiting_message(local: Processor, job_id: str, job_type: str = "wait") -> str:
    """A message held hidden on the jobs queue with a WAITING lease that keeps its job (as admission
    leaves a message of a full type)."""
    job = json.dumps({"job_id": job_id, "type": job_type, "params": {"seconds": 5}})
    local.sqs.send_message(QueueUrl=local.queue_url, MessageBody=job)
    [message] = local.sqs.receive_message(QueueUrl=local.queue_url, VisibilityTimeout=300)["Messages"]
    local.put_lease(
        message["MessageId"],
        status=LeaseStatus.WAITING,
        receipt_handle=message["ReceiptHandle"],
        job_type=job_type,
        job_id=job_id,
        job=job,
        waiting_order=1.0,
        waiting_since=1.0,
    )
    return str(message["MessageId"])


def dlq_errors(local: Processor) -> list[tuple[str, str]]:
    got = local.sqs.receive_message(
        QueueUrl=local.dlq_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=0
    )
    return [
        (m["MessageAttributes"]["ErrorType"]["StringValue"], m["MessageAttributes"]["ErrorMessage"]["StringValue"])
        for m in got.get("Messages", [])
    ]


def lease_status(local: Processor, message_id: str) -> str:
    item = local.dynamodb.get_item(TableName=local.table_name, Key={"pk": {"S": message_id}})["Item"]
    return str(item["status"]["S"])


def test_cli_cancel_waiting_message_dead_letters_it_and_reports_it(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    message_id = waiting_message(local, "nightly")

    result = run(capsys, "--endpoint-url", endpoint, "cancel", message_id, "--reason", "bad date", "--yes", "--json")

    assert result.code == 0, result
    [report] = result.json()
    assert (report["message_id"], report["outcome"], report["previous_status"]) == (message_id, "cancelled", "WAITING")
    assert report["deleted"] and report["dead_letter_id"]
    assert dlq_errors(local) == [("Cancelled", "bad date")]
    assert lease_status(local, message_id) == "CANCELLED"
    attributes = local.sqs.get_queue_attributes(QueueUrl=local.queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessagesNotVisible"] == "0", "deleted from the jobs queue, not released"


def test_cli_cancel_by_job_id_cancels_every_open_message_and_reports_the_finished(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job id with several messages: every one still to run is cancelled (one confirmation for all), the
    ones already finished are reported as they are."""
    first, second = waiting_message(local, "shared"), waiting_message(local, "shared")
    local.put_lease("done-1", status=LeaseStatus.SUCCEEDED, job_id="shared", now=1.0)

    result = run(capsys, "--endpoint-url", endpoint, "cancel", "shared", "--yes", "--json")

    assert result.code == 0, result
    outcomes = {report["message_id"]: report["outcome"] for report in result.json()}
    assert outcomes == {first: "cancelled", second: "cancelled", "done-1": "already_succeeded"}
    assert [error for error, _ in dlq_errors(local)] == ["Cancelled", "Cancelled"]


def test_cli_cancel_of_a_job_that_already_succeeded_does_nothing_and_exits_1(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    local.put_lease("done-1", status=LeaseStatus.SUCCEEDED, job_id="quick")

    result = run(capsys, "--endpoint-url", endpoint, "cancel", "done-1", "--yes")

    assert result.code == 1 and "already succeeded" in result.out
    assert dlq_errors(local) == [] and lease_status(local, "done-1") == "SUCCEEDED"


def test_cli_cancel_of_a_job_that_already_succeeded_says_why_on_stderr(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit code 1 comes with its one line on stderr, as every error's does: with `--json` (stdout to a
    script) the failure would otherwise be a bare exit code."""
    local.put_lease("done-1", status=LeaseStatus.SUCCEEDED, job_id="quick")

    result = run(capsys, "--endpoint-url", endpoint, "cancel", "done-1", "--yes", "--json")

    assert [report["outcome"] for report in result.json()] == ["already_succeeded"]
    assert_one_line_error(result, 1, "already succeeded", "nothing was cancelled")


def test_cli_cancel_unknown_id_fails_in_one_line_naming_it(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run(capsys, "--endpoint-url", endpoint, "cancel", "no-such-id", "--yes")

    assert_one_line_error(result, 1, "no lease for message or job id 'no-such-id'")


@pytest.mark.parametrize("key", served.NOT_LEASES)
def test_cli_cancel_of_a_key_that_is_not_a_lease_fails_as_an_unknown_id(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], key: str
) -> None:
    """A job lock's, a slot's or the published job types' key names no message (its item is not a lease),
    and no job has it as its id: the command says so in one line, and changes nothing."""
    served.put_non_leases(local)

    result = run(capsys, "--endpoint-url", endpoint, "cancel", key, "--yes")

    assert_one_line_error(result, 1, f"no lease for message or job id {key!r}")
    assert dlq_errors(local) == []


def test_cli_cancel_by_job_id_goes_on_past_a_message_it_could_not_cancel(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job id's messages are cancelled one by one. One whose cancel fails (here its job lock could not
    be freed) does not stop the others: every message's report is printed, with the failure's error, and
    the command exits with 1."""
    first, second = waiting_message(local, "shared"), waiting_message(local, "shared")
    real_cancel = cancel.cancel

    def lock_not_freed(canceller: Any, message_id: str, reason: str = cancel.DEFAULT_REASON) -> Any:
        if message_id == first:
            raise cancel.HoldsNotFreed("job#shared is still held by x: cancel again to finish")
        return real_cancel(canceller, message_id, reason)

    monkeypatch.setattr(cancel, "cancel", lock_not_freed)

    result = run(capsys, "--endpoint-url", endpoint, "cancel", "shared", "--yes", "--json")

    assert result.code == 1, result
    reports = {report["message_id"]: report for report in result.json()}
    assert (reports[first]["outcome"], reports[first]["error"]) == (
        "failed",
        "job#shared is still held by x: cancel again to finish",
    )
    assert (reports[second]["outcome"], reports[second]["error"]) == ("cancelled", None)
    assert set(reports[first]) == set(reports[second]), "one kind of object"
    assert result.err.strip().splitlines() == [
        f"longjobs: cancel of {first} failed: job#shared is still held by x: cancel again to finish"
    ]
    assert dlq_errors(local) == [("Cancelled", cancel.DEFAULT_REASON)]
    assert lease_status(local, second) == "CANCELLED"


def test_cli_cancel_without_a_terminal_or_yes_refuses_and_changes_nothing(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], no_terminal: None
) -> None:
    message_id = waiting_message(local, "nightly")

    result = run(capsys, "--endpoint-url", endpoint, "cancel", message_id)

    assert_one_line_error(result, 1, "cancel asks for confirmation", "stdin is not a terminal", "--yes")
    assert lease_status(local, message_id) == "WAITING" and dlq_errors(local) == []


def test_cli_cancel_on_a_terminal_asks_and_goes_ahead_only_on_yes(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    message_id = waiting_message(local, "nightly")
    asked = terminal_answering(monkeypatch, "n\n")

    refused = run(capsys, "--endpoint-url", endpoint, "cancel", message_id)

    assert_one_line_error(refused, 1, "cancel not confirmed: nothing was changed")
    assert len(asked) == 1 and message_id in asked[0] and lease_status(local, message_id) == "WAITING"

    terminal_answering(monkeypatch, "yes\n")
    done = run(capsys, "--endpoint-url", endpoint, "cancel", message_id)

    assert done.code == 0 and lease_status(local, message_id) == "CANCELLED"


def test_cli_dlq_redrive_without_a_terminal_or_yes_refuses_and_moves_nothing(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], no_terminal: None
) -> None:
    local.dead_letter('{"job_id": "a", "type": "wait", "params": {}}', ErrorType="AttemptsExhausted")

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive")

    assert_one_line_error(result, 1, "dlq redrive asks for confirmation", "--yes")
    assert len(local.bodies(local.dlq_url)) == 1 and local.bodies(local.queue_url) == []


def test_cli_dlq_redrive_dry_run_needs_no_confirmation(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], no_terminal: None
) -> None:
    local.dead_letter('{"job_id": "a", "type": "wait", "params": {}}', ErrorType="AttemptsExhausted")

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--dry-run", "--json")

    assert result.code == 0 and len(result.json()["messages"]) == 1


def test_cli_dlq_redrive_on_a_terminal_asks_then_moves(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    local.dead_letter('{"job_id": "a", "type": "wait", "params": {}}', ErrorType="AttemptsExhausted")
    asked = terminal_answering(monkeypatch, "y\n")

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--json")

    assert result.code == 0 and result.json()["moved"] == 1 and len(asked) == 1


def test_cli_dlq_redrive_leaves_cancelled_messages_unless_asked(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    local.dead_letter('{"job_id": "a", "type": "wait", "params": {}}', ErrorType="Cancelled")

    kept = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--yes", "--json")
    moved = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--error-type", "Cancelled", "--yes", "--json")

    assert (kept.json()["moved"], kept.json()["kept"]) == (0, 1), "an operator's cancel is not undone by default"
    assert moved.json()["moved"] == 1


def test_cli_top_once_shows_queues_types_against_their_limits_and_parked(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(JOB_TYPES), encoding="utf-8")
    local.put_lease("run-1", job_type="backfill", renewal_count=3)
    local.put_lease("wait-1", status=LeaseStatus.WAITING, job_type="backfill", waiting_order=1.0, job="{}")
    local.put_lease("park-1", status=LeaseStatus.PARKED, job_type="backfill")
    local.put_lease("park-2", status=LeaseStatus.PARKED, job_type="backfill", claimed_by="copy-1")
    local.dead_letter()

    framed = run(capsys, "--endpoint-url", endpoint, "top", "--once", "--jobs-file", str(jobs_file))
    data = run(capsys, "--endpoint-url", endpoint, "top", "--jobs-file", str(jobs_file), "--json").json()

    assert framed.code == 0, framed
    assert "job types" in framed.out and "backfill" in framed.out and "0 / 2" in framed.out
    [line] = [line for line in data["types"] if line["job_type"] == "backfill"]
    assert (line["running"], line["limit"], line["waiting"], line["parked"]) == (1, 2, 1, 1), "a claimed marker ran"
    # a wait type runs nothing billable of its own: its running attempt costs the processor's share
    assert 0.0003 < line["running_usd"] < 0.001 and "cost so far" in framed.out
    assert data["status"]["dlq"]["total"] == 1
    assert data["renewal_rate_source"] == "last hour's average"


def test_cli_top_once_of_an_idle_processor_says_why_its_types_table_is_empty(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """With nothing running, waiting or parked, and no type limited, the job types table has no row: a note
    says so, rather than leave an empty table to read as a failed read."""
    jobs_file = tmp_path / "jobs.json"
    nap = {"name": "nap", "runner": "wait", "params_schema": JOB_TYPES["job_types"][0]["params_schema"]}
    jobs_file.write_text(json.dumps({"job_types": [nap]}), encoding="utf-8")

    framed = run(capsys, "--endpoint-url", endpoint, "top", "--once", "--jobs-file", str(jobs_file))

    assert framed.code == 0, framed
    assert "job types: none has a job running, waiting or parked, or a limit" in " ".join(framed.out.split())


def test_cli_top_asks_for_the_job_types_only_when_none_were_given(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    unlimited = tmp_path / "jobs.json"
    nap = {"name": "nap", "runner": "wait", "params_schema": JOB_TYPES["job_types"][0]["params_schema"]}
    unlimited.write_text(json.dumps({"job_types": [nap]}), encoding="utf-8")
    local.put_lease("run-1", job_type="nap")

    given = run(capsys, "--endpoint-url", endpoint, "top", "--jobs-file", str(unlimited), "--json").json()
    local.dynamodb.delete_item(TableName=local.table_name, Key={"pk": {"S": CATALOG_KEY}})
    missing = run(capsys, "--endpoint-url", endpoint, "top", "--json").json()

    assert not any("--jobs-file" in note for note in given["notes"]), "a catalog with no limited type was given"
    assert missing["notes"] == ["limits unknown: the deployment publishes no job types (pass --jobs-file FILE)"]


def test_cli_lease_prices_its_attempts_with_a_jobs_file_when_none_is_published(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    """A deployment that publishes no job types leaves `lease` without the types its costs need: `--jobs-file`
    gives them, as it does for `submit` and `top`."""
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps(JOB_TYPES), encoding="utf-8")
    local.stepfunctions.start_execution(stateMachineArn=local.state_machine_arn, name="msg-9-1")
    local.put_lease("msg-9", job_type="backfill")
    local.dynamodb.delete_item(TableName=local.table_name, Key={"pk": {"S": CATALOG_KEY}})

    unpriced = run(capsys, "--endpoint-url", endpoint, "lease", "msg-9", "--json")
    priced = run(capsys, "--endpoint-url", endpoint, "lease", "msg-9", "--jobs-file", str(jobs_file), "--json")

    assert unpriced.code == 0 and unpriced.json()["executions"][0]["usage"] is None, unpriced
    assert priced.code == 0, priced
    assert priced.json()["executions"][0]["usage"] is not None, "the file's types price the running attempt"


class Operations:
    """Every AWS operation a command calls, recorded from botocore's events on its session."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def record(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls.append((model.name, params))

    @property
    def names(self) -> set[str]:
        return {name for name, _ in self.calls}


@pytest.fixture
def operations(monkeypatch: pytest.MonkeyPatch) -> Operations:
    recorded = Operations()
    made = clients.make_session

    def session(connection: clients.Connection) -> boto3.session.Session:
        built = made(connection)
        built.events.register("before-parameter-build", recorded.record)
        return built

    monkeypatch.setattr(clients, "make_session", session)
    return recorded


@pytest.mark.parametrize("argv", [("top", "--once"), ("top", "--json"), ("status",), ("status", "--json")])
def test_cli_top_and_status_never_receive_a_message(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], operations: Operations, argv: tuple[str, ...]
) -> None:
    local.dead_letter()
    local.sqs.send_message(QueueUrl=local.queue_url, MessageBody="{}")

    result = run(capsys, "--endpoint-url", endpoint, *argv)

    assert result.code == 0, result
    assert {"GetQueueAttributes", "Scan"} <= operations.names, "the recorder saw the command's calls"
    assert "ReceiveMessage" not in operations.names


def test_cli_dlq_list_receives_and_shows_every_message_again_at_once(
    local: Processor, endpoint: str, capsys: pytest.CaptureFixture[str], operations: Operations
) -> None:
    """`dlq list` may receive (SQS has no other way to look); every message it hid is visible again
    (visibility 0) before it returns."""
    for _ in range(3):
        local.dead_letter()

    result = run(capsys, "--endpoint-url", endpoint, "dlq", "list", "--json")

    assert result.code == 0 and len(result.json()) == 3
    assert "ReceiveMessage" in operations.names
    shown = [
        entry
        for name, params in operations.calls
        if name == "ChangeMessageVisibilityBatch"
        for entry in params["Entries"]
    ]
    assert len(shown) == 3 and {entry["VisibilityTimeout"] for entry in shown} == {0}
