"""`dlq redrive` on moto: the copy loop never deletes a message before its send succeeded, respects the
rate, does not send a copy that came back; the message move task is used where the endpoint has it."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from typing import Any, ClassVar

import boto3
import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from moto import mock_aws

from longjobs.cli import clients
from longjobs.cli.dlq import RedriveFilter, RedriveStopped, copy_messages, redrive
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried, Outcome
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.receiver.service import receive
from longjobs.offline.emulator import FAKE_CREDENTIALS, Emulator
from tests.functional import test_cli_stack as stack
from tests.functional.conftest import running_flow
from tests.longjobs_support import Processor, assert_one_line_error, create_processor, run

deployed = stack.deployed  # its fixture: a stack on moto


@pytest.fixture
def processor() -> Iterator[Processor]:
    with mock_aws():
        session = boto3.session.Session(region_name="us-east-1")
        yield create_processor(session.client("sqs"), session.client("dynamodb"), session.client("stepfunctions"))


class RecordingSqs:
    """The moto client, recording sends and deletes in order, failing the sends of chosen bodies."""

    def __init__(
        self, sqs: Any, *, fail_bodies: frozenset[str] = frozenset(), fail_all: bool = False, failed_deletes: int = 0
    ) -> None:
        self._sqs = sqs
        self.fail_bodies = fail_bodies
        self.fail_all = fail_all
        self.failed_deletes = failed_deletes
        """How many `DeleteMessageBatch` requests fail as a whole (a 5xx past the SDK's retries: none deleted)."""
        self.calls: list[tuple[str, str]] = []  # (operation, message body or DLQ message id)
        self._bodies: dict[str, str] = {}  # DLQ receipt handle -> body

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)

    def receive_message(self, **kwargs: Any) -> Any:
        response = self._sqs.receive_message(**kwargs)
        for message in response.get("Messages", []):
            self._bodies[message["ReceiptHandle"]] = message["Body"]
        return response

    def send_message(self, **kwargs: Any) -> Any:
        body = kwargs["MessageBody"]
        if self.fail_all or body in self.fail_bodies:
            self.calls.append(("send-failed", body))
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "SendMessage")
        self.calls.append(("send", body))
        return self._sqs.send_message(**kwargs)

    def delete_message_batch(self, **kwargs: Any) -> Any:
        for entry in kwargs["Entries"]:
            self.calls.append(("delete", self._bodies[entry["ReceiptHandle"]]))
        if self.failed_deletes:
            self.failed_deletes -= 1
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "DeleteMessageBatch")
        return self._sqs.delete_message_batch(**kwargs)

    def delete_message(self, **kwargs: Any) -> Any:
        self.calls.append(("delete", self._bodies[kwargs["ReceiptHandle"]]))
        return self._sqs.delete_message(**kwargs)


SQS_URL = "https://sqs.us-east-1.amazonaws.com/"


def no_answer() -> ReadTimeoutError:
    """What botocore raises when SQS does not answer in time, once the SDK's retries are spent."""
    return ReadTimeoutError(endpoint_url=SQS_URL)


class FaultySqs(RecordingSqs):
    """`RecordingSqs`, whose sends of chosen bodies raise chosen errors, and whose receives fail from the
    `receives_ok + 1`-th on (no answer)."""

    def __init__(
        self, sqs: Any, *, raising: dict[str, BaseException] | None = None, receives_ok: int | None = None
    ) -> None:
        super().__init__(sqs)
        self.raising = raising or {}
        self.receives_ok = receives_ok

    def receive_message(self, **kwargs: Any) -> Any:
        if self.receives_ok is not None:
            if self.receives_ok == 0:
                raise no_answer()
            self.receives_ok -= 1
        return super().receive_message(**kwargs)

    def send_message(self, **kwargs: Any) -> Any:
        error = self.raising.get(kwargs["MessageBody"])
        if error is not None:
            self.calls.append(("send-failed", kwargs["MessageBody"]))
            raise error
        return super().send_message(**kwargs)


def visible(processor: Processor, queue_url: str) -> int:
    attributes = processor.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(attributes["Attributes"]["ApproximateNumberOfMessages"])


def _dead_letters(processor: Processor, count: int) -> list[str]:
    bodies = [f'{{"job_id": "j{i}"}}' for i in range(count)]
    for body in bodies:
        processor.dead_letter(body, ErrorType="NotJson", ErrorMessage="x", ReceiveCount="1")
    return bodies


def test_cli_redrive_never_deletes_a_message_whose_send_failed(processor: Processor) -> None:
    bodies = _dead_letters(processor, 12)
    failing = bodies[4]
    sqs = RecordingSqs(processor.sqs, fail_bodies=frozenset({failing}))

    result = copy_messages(sqs, processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]

    assert (result.moved, result.failed) == (11, 1)
    assert any("not sent: InternalError" in error for error in result.errors)
    assert ("delete", failing) not in sqs.calls
    for body in bodies:  # every delete comes after that message's successful send
        if body != failing:
            assert sqs.calls.index(("send", body)) < sqs.calls.index(("delete", body))
    assert processor.bodies(processor.dlq_url) == [failing]  # still there, and visible again
    assert sorted(processor.bodies(processor.queue_url)) == sorted(set(bodies) - {failing})


def test_cli_redrive_deletes_nothing_when_every_send_fails(processor: Processor) -> None:
    bodies = _dead_letters(processor, 3)
    sqs = RecordingSqs(processor.sqs, fail_all=True)

    result = copy_messages(sqs, processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]

    assert (result.moved, result.failed) == (0, 3)
    assert not [call for call in sqs.calls if call[0] == "delete"]
    assert sorted(processor.bodies(processor.dlq_url)) == sorted(bodies)


def test_cli_redrive_reports_a_failed_delete_and_goes_on(processor: Processor) -> None:
    """A `DeleteMessageBatch` that fails as a whole (a 5xx past the SDK's retries) leaves its page in both
    queues: each message is reported as sent but not deleted, and the other pages are moved. The
    simulation's operator found the command dying there."""
    bodies = _dead_letters(processor, 12)
    sqs = RecordingSqs(processor.sqs, failed_deletes=1)

    result = copy_messages(sqs, processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]

    assert (result.moved, result.failed) == (2, 0)
    assert sum("sent, but not deleted from the DLQ: InternalError" in error for error in result.errors) == 10
    assert sorted(processor.bodies(processor.queue_url)) == sorted(bodies), "each sent once"
    assert len(processor.bodies(processor.dlq_url)) == 10, "the page not deleted stays, visible again"


def test_cli_redrive_counts_a_send_with_no_answer_as_failed_and_goes_on(processor: Processor) -> None:
    """A send that gets no answer in time (botocore's `ReadTimeoutError`, after the SDK's retries) fails
    that message's send only: it stays in the DLQ and is reported, and the others are moved and deleted."""
    bodies = _dead_letters(processor, 3)
    failing_id = processor.dead_letter('{"job_id": "late"}', ErrorType="NotJson", ErrorMessage="x", ReceiveCount="1")
    sqs = FaultySqs(processor.sqs, raising={'{"job_id": "late"}': no_answer()})

    result = copy_messages(sqs, processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]

    assert (result.moved, result.failed, result.stopped) == (3, 1, False)
    assert result.errors == [f"{failing_id}: not sent: ReadTimeoutError: {no_answer()}"]
    assert processor.bodies(processor.dlq_url) == ['{"job_id": "late"}'], "still there, and visible again"
    assert sorted(processor.bodies(processor.queue_url)) == sorted(bodies)


def test_cli_redrive_cut_short_mid_page_deletes_what_it_sent_and_shows_the_rest(processor: Processor) -> None:
    """A run ended in the middle of a page (here Ctrl-C during a send) still deletes the page's messages
    it sent, so the next redrive does not send them twice, and shows the others in the DLQ again at once."""
    bodies = _dead_letters(processor, 5)
    sqs = FaultySqs(processor.sqs, raising={bodies[2]: KeyboardInterrupt()})

    with pytest.raises(KeyboardInterrupt):
        copy_messages(sqs, processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]

    sent = [body for operation, body in sqs.calls if operation == "send"]
    assert len(sent) == 2 and {("delete", body) for body in sent} <= set(sqs.calls)
    assert visible(processor, processor.dlq_url) == 3, "the page's other messages are not left hidden"
    assert sorted(processor.bodies(processor.dlq_url)) == sorted(set(bodies) - set(sent))
    assert sorted(processor.bodies(processor.queue_url)) == sorted(sent)


def test_cli_redrive_stopped_by_a_failed_receive_reports_what_it_did(processor: Processor) -> None:
    """A receive that fails for good ends the run. What it did stands: the first page's messages are sent
    and deleted, the message whose send failed is visible again, and `RedriveStopped` carries the result
    and the error."""
    bodies = _dead_letters(processor, 12)
    refused = ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "SendMessage")
    sqs = FaultySqs(processor.sqs, raising={bodies[0]: refused}, receives_ok=1)

    with pytest.raises(RedriveStopped) as stopped:
        copy_messages(sqs, processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]

    result = stopped.value.result
    assert isinstance(stopped.value.error, ReadTimeoutError)
    assert (result.moved, result.failed, result.stopped) == (9, 1, True)
    assert visible(processor, processor.dlq_url) == 3, "the failed one shown again, the second page not received"
    assert len(processor.bodies(processor.queue_url)) == 9


def test_cli_redrive_stopped_by_an_error_prints_what_it_did_then_the_error(
    deployed: Processor, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command prints the run's result (what moved, that it stopped), then the error in one line, and
    exits with 1. The messages it sent are gone from the DLQ, so running it again sends none twice."""
    bodies = _dead_letters(deployed, 12)
    faulty = FaultySqs(deployed.sqs, receives_ok=1)
    monkeypatch.setattr(clients.Clients, "sqs", property(lambda _: faulty))

    result = run(capsys, "--stack", stack.STACK, "dlq", "redrive", "--include-poison", "--yes", "--json")

    assert_one_line_error(result, 1, f"no answer in time from {SQS_URL}")
    assert (result.json()["moved"], result.json()["failed"], result.json()["stopped"]) == (10, 0, True)
    faulty.receives_ok = None
    again = run(capsys, "--stack", stack.STACK, "dlq", "redrive", "--include-poison", "--yes")
    assert again.code == 0, again.err
    assert "moved 2 message(s)" in again.out
    assert sorted(deployed.bodies(deployed.queue_url)) == sorted(bodies), "each sent once"


def test_cli_redrive_keeps_to_the_rate(processor: Processor) -> None:
    _dead_letters(processor, 5)
    now = [0.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(round(seconds, 6))
        now[0] += seconds

    result = copy_messages(
        processor.sqs, processor.dlq_url, processor.queue_url, max_per_second=2, clock=lambda: now[0], sleep=sleep
    )

    assert result.moved == 5
    assert now[0] == pytest.approx(2.0)  # the 5th send no earlier than 4 / 2 s after the start
    assert pauses == [0.5, 0.5, 0.5, 0.5]


def test_cli_redrive_does_not_send_again_a_copy_that_came_back(processor: Processor) -> None:
    """Poison goes straight back to the DLQ (a new message naming the one it came from): left there."""
    sqs = processor.sqs
    processor.dead_letter("{not json", ErrorType="NotJson", ErrorMessage="x", ReceiveCount="1")

    class Bouncing(RecordingSqs):
        def send_message(self, **kwargs: Any) -> Any:
            sent = super().send_message(**kwargs)
            attributes = {"OriginalMessageId": {"DataType": "String", "StringValue": sent["MessageId"]}}
            sqs.send_message(
                QueueUrl=processor.dlq_url, MessageBody=kwargs["MessageBody"], MessageAttributes=attributes
            )
            return sent

    bouncing = Bouncing(sqs)
    result = copy_messages(bouncing, processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]

    assert (result.moved, result.came_back) == (1, 1)
    assert [call for call in bouncing.calls if call[0] == "send"] == [("send", "{not json")]
    assert processor.bodies(processor.dlq_url) == ["{not json"]  # the copy that came back, visible again


def test_cli_redrive_starts_the_message_move_task_where_the_endpoint_has_it(processor: Processor) -> None:
    _dead_letters(processor, 2)
    started: list[dict[str, Any]] = []

    class WithMoveTask(RecordingSqs):
        def start_message_move_task(self, **kwargs: Any) -> Any:
            started.append(kwargs)
            return {"TaskHandle": "task-1"}

    sqs = WithMoveTask(processor.sqs)

    everything = RedriveFilter(include_poison=True)  # a move task cannot filter: only then is it used
    result = redrive(sqs, processor.dlq_url, processor.queue_url, max_per_second=10, select=everything)  # type: ignore[arg-type]

    assert (result.method, result.task_handle, result.approximate_messages) == ("move-task", "task-1", 2)
    assert started == [
        {
            "SourceArn": "arn:aws:sqs:us-east-1:123456789012:jobs-dlq",
            "DestinationArn": "arn:aws:sqs:us-east-1:123456789012:jobs",
            "MaxNumberOfMessagesPerSecond": 10,
        }
    ]
    assert sqs.calls == []  # nothing copied by hand


def test_cli_redrive_reports_an_error_of_the_move_task_that_is_not_a_missing_operation(processor: Processor) -> None:
    class Refusing(RecordingSqs):
        def start_message_move_task(self, **kwargs: Any) -> Any:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "StartMessageMoveTask")

    with pytest.raises(ClientError, match="AccessDenied"):
        redrive(
            Refusing(processor.sqs), processor.dlq_url, processor.queue_url, select=RedriveFilter(include_poison=True)
        )  # type: ignore[arg-type]


def test_cli_redrive_finds_the_move_task_its_failed_start_started(processor: Processor) -> None:
    """A start whose answer was lost (a 5xx or a timeout after SQS took it) may have started the task, and
    a retry then meets "already a task running" (API_StartMessageMoveTask: one active task per queue).
    The command reads the DLQ's newest task and reports that one running, rather than an error while
    SQS moves the messages; with no task running, the start's error stands."""
    _dead_letters(processor, 2)
    running = [
        {
            "Status": "RUNNING",
            "TaskHandle": "task-7",
            "SourceArn": "arn:aws:sqs:us-east-1:123456789012:jobs-dlq",
            "DestinationArn": "arn:aws:sqs:us-east-1:123456789012:jobs",
        }
    ]

    class AnswerLost(RecordingSqs):
        tasks: list[dict[str, Any]] = running

        def start_message_move_task(self, **kwargs: Any) -> Any:
            raise ClientError({"Error": {"Code": "InternalError", "Message": "try again"}}, "StartMessageMoveTask")

        def list_message_move_tasks(self, **kwargs: Any) -> Any:
            assert kwargs["SourceArn"] == running[0]["SourceArn"]
            return {"Results": self.tasks}

    everything = RedriveFilter(include_poison=True)
    result = redrive(AnswerLost(processor.sqs), processor.dlq_url, processor.queue_url, select=everything)  # type: ignore[arg-type]
    assert (result.method, result.task_handle) == ("move-task", "task-7")

    AnswerLost.tasks = [{**running[0], "Status": "COMPLETED"}]
    with pytest.raises(ClientError, match="InternalError"):
        redrive(AnswerLost(processor.sqs), processor.dlq_url, processor.queue_url, select=everything)  # type: ignore[arg-type]


def test_cli_redrive_finds_the_move_task_a_start_with_no_answer_started(processor: Processor) -> None:
    """A start that gets no answer in time (`ReadTimeoutError`: the start's client makes one attempt) may
    have started the task on SQS. The command reads the DLQ's newest task (API_ListMessageMoveTasks:
    the most recent task of a source queue first) and reports it when it runs to the jobs queue; with
    none running, the timeout stands."""
    _dead_letters(processor, 2)
    running = {
        "Status": "RUNNING",
        "TaskHandle": "task-8",
        "SourceArn": "arn:aws:sqs:us-east-1:123456789012:jobs-dlq",
        "DestinationArn": "arn:aws:sqs:us-east-1:123456789012:jobs",
    }

    class NoAnswer(RecordingSqs):
        tasks: ClassVar[list[dict[str, Any]]] = [running]

        def start_message_move_task(self, **kwargs: Any) -> Any:
            raise no_answer()

        def list_message_move_tasks(self, **kwargs: Any) -> Any:
            return {"Results": self.tasks}

    everything = RedriveFilter(include_poison=True)
    result = redrive(NoAnswer(processor.sqs), processor.dlq_url, processor.queue_url, select=everything)  # type: ignore[arg-type]
    assert (result.method, result.task_handle, result.approximate_messages) == ("move-task", "task-8", 2)

    NoAnswer.tasks = []
    with pytest.raises(ReadTimeoutError):
        redrive(NoAnswer(processor.sqs), processor.dlq_url, processor.queue_url, select=everything)  # type: ignore[arg-type]


def test_cli_redrive_while_a_move_task_runs_is_refused_and_claims_no_task(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQS runs one message move task per queue at a time ("Only one active message movement task is
    supported per queue at any given time", API_StartMessageMoveTask:
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html), and
    refuses a second start with a 400 that starts nothing. A redrive run while an earlier one's task moves
    the DLQ fails with that refusal (exit 1). Reporting the running task as one it started would tell the
    operator their redrive began, and hide that another one still runs."""
    for key, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    sqs = emulator.sqs()
    dlq_url = sqs.create_queue(QueueName="jobs-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 10})
    sqs.create_queue(QueueName="jobs", Attributes={"RedrivePolicy": policy})
    for i in range(5):
        sqs.send_message(QueueUrl=dlq_url, MessageBody=json.dumps({"job_id": f"j{i}", "type": "wait"}))
    command = ("--endpoint-url", emulator.endpoint, "dlq", "redrive", "--include-poison", "--max-per-second", "1")

    first = run(capsys, *command, "--yes", "--json")
    assert (first.code, first.json()["method"]) == (0, "move-task"), first
    second = run(capsys, *command, "--yes")

    assert_one_line_error(second, 1, "StartMessageMoveTask failed: InvalidParameterValue", "already a task running")
    assert "started" not in second.out, second.out
    tasks = sqs.list_message_move_tasks(SourceArn=dlq_arn, MaxResults=10)["Results"]
    assert [(task["Status"], task.get("TaskHandle")) for task in tasks] == [("RUNNING", first.json()["task_handle"])]


def test_cli_redrive_copy_keeps_the_original_message_id_and_drops_the_failure(processor: Processor) -> None:
    """A redriven message is a new message: "All redriven messages are considered new messages and are
    assigned a new messageID" (DLQ redrive guide,
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-configure-dead-letter-queue-redrive.html).
    So only its `OriginalMessageId` tells which message a redrive's copy is, and the local service's observer
    follows a copy by it. Without it, a redriven poison body that came back to the DLQ was a message of its
    own, and `serve`'s checker judged its original lost. The failure's own attributes stay behind: the
    receiver attaches fresh ones if the copy fails again."""
    processor.dead_letter(
        "{not json",
        ErrorType="NotJson",
        ErrorMessage="body is not JSON",
        SourceQueue="arn:aws:sqs:us-east-1:123456789012:jobs",
        OriginalMessageId="original-1",
        ReceiveCount="1",
        Team="data",
    )

    result = redrive(
        processor.sqs, processor.dlq_url, processor.queue_url, select=RedriveFilter(error_types=frozenset({"NotJson"}))
    )

    assert (result.method, result.moved) == ("copy", 1), result
    [copy] = processor.sqs.receive_message(QueueUrl=processor.queue_url, MessageAttributeNames=["All"])["Messages"]
    attributes = {name: value["StringValue"] for name, value in copy["MessageAttributes"].items()}
    assert attributes == {"OriginalMessageId": "original-1", "Team": "data"}


def _mixed_dead_letters(processor: Processor) -> None:
    processor.dead_letter("{not json", ErrorType="NotJson", ErrorMessage="not JSON", ReceiveCount="1")
    for job_id, job_type in (("a", "wait"), ("b", "spark")):
        body = json.dumps({"job_id": job_id, "type": job_type, "params": {}})
        processor.dead_letter(body, ErrorType="AttemptsExhausted", ErrorMessage="boom", ReceiveCount="6")


class MoveTaskRecorder(RecordingSqs):
    """An endpoint with SQS's move task: a filtered redrive must not use it (it moves everything)."""

    def start_message_move_task(self, **kwargs: Any) -> Any:
        raise AssertionError("a filtered redrive started a move task")


def test_cli_redrive_leaves_poison_in_the_dlq_by_default(processor: Processor) -> None:
    _mixed_dead_letters(processor)
    result = redrive(MoveTaskRecorder(processor.sqs), processor.dlq_url, processor.queue_url)  # type: ignore[arg-type]
    assert (result.method, result.moved, result.skipped, result.kept) == ("copy", 2, 0, 1)
    assert sorted(json.loads(body)["job_id"] for body in processor.bodies(processor.queue_url)) == ["a", "b"]
    assert processor.bodies(processor.dlq_url) == ["{not json"], "poison stays where it is"


@pytest.mark.parametrize(
    ("select", "moved"),
    [
        (RedriveFilter(job_type="spark"), ["b"]),
        (RedriveFilter(job_id="a"), ["a"]),
        (RedriveFilter(error_types=frozenset({"NotJson"})), ["{not json"]),  # named: poison moves too
        (RedriveFilter(include_poison=True, job_type="wait"), ["a"]),
        (RedriveFilter(since=time.time() + 3_600), []),
    ],
)
def test_cli_redrive_moves_only_what_the_filter_selects(
    processor: Processor, select: RedriveFilter, moved: list[str]
) -> None:
    _mixed_dead_letters(processor)
    result = redrive(MoveTaskRecorder(processor.sqs), processor.dlq_url, processor.queue_url, select=select)  # type: ignore[arg-type]
    assert result.moved == len(moved) and result.skipped + result.kept == 3 - len(moved)
    bodies = processor.bodies(processor.queue_url)
    assert sorted(json.loads(b)["job_id"] if b.startswith('{"') else b for b in bodies) == moved
    assert len(processor.bodies(processor.dlq_url)) == 3 - len(moved), "the rest stays in the DLQ, visible"


class _SendHook:
    """An SQS client whose first SendMessage to `queue_url` runs `hook` once it landed, before it answers:
    another handling of the same record, interleaved there."""

    def __init__(self, sqs: Any, queue_url: str) -> None:
        self._sqs, self._queue_url = sqs, queue_url
        self.hook: Any = None

    def send_message(self, **kwargs: Any) -> Any:
        answer = self._sqs.send_message(**kwargs)
        if kwargs.get("QueueUrl") == self._queue_url and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sqs, name)


def test_cli_redrive_of_a_message_two_handlings_dead_lettered_runs_its_job_once() -> None:
    """The mapping processes a record at least once (and SQS may hand a message out twice): two handlings
    of a message whose attempts are used up each send it to the DLQ, the second before the first records
    its send. The default redrive (AttemptsExhausted moves) sends one copy back, and deletes the other:
    sent too, the job id's lock would run the job twice, one run after the other."""
    with running_flow(max_attempts=1) as flow:
        message_id = flow.send_job("exhausted", seconds=0, fail=True)
        assert flow.deliver() == {message_id: Outcome.STARTED}
        arn = flow.lease(message_id).execution_arn
        assert arn is not None and flow.wait_for_execution(arn)["status"] == "FAILED"
        assert flow.lease(message_id).status is LeaseStatus.RELEASED  # its last attempt: shown again at once

        [delivery] = flow.receive_batch()
        hooked = _SendHook(flow.sqs, flow.dlq_url)
        receiver = dataclasses.replace(flow.receiver, sqs=hooked)
        second: list[Outcome] = []
        hooked.hook = lambda: second.append(receive(receiver, delivery))
        assert (receive(receiver, delivery), second) == (Outcome.REJECTED, [Outcome.REJECTED])

        result = redrive(flow.sqs, flow.dlq_url, flow.harness.queue_url)

        back = flow.sqs.receive_message(QueueUrl=flow.harness.queue_url, MaxNumberOfMessages=10).get("Messages", [])
        left = flow.sqs.receive_message(QueueUrl=flow.dlq_url, MaxNumberOfMessages=10).get("Messages", [])
        assert [json.loads(m["Body"])["job_id"] for m in back] == ["exhausted"], result
        assert (result.moved, result.duplicates, left) == (1, 1, []), result


def test_cli_redrive_of_a_copy_sqs_dead_lettered_runs_its_job() -> None:
    """A requeued copy (it waited for its job id) that SQS itself moved to the DLQ (the queue's redrive count,
    a backstop) keeps every attribute, its `LongJobsAdmission` too, which names the REQUEUED marker its run was
    claimed by and carries its attempts. The marker is long gone when an operator redrives it: the copy must
    run as the job message it is, not be taken for a twin whose claim cannot be told."""
    with running_flow() as flow:
        carried = Carried(original_id="producer-1", requeued_from="gone-1", job_waits=3).encode()
        body = json.dumps({"job_id": "backstopped", "type": "wait", "params": {"seconds": 0}})
        flow.sqs.send_message(
            QueueUrl=flow.dlq_url,
            MessageBody=body,
            MessageAttributes={ADMISSION_ATTRIBUTE: {"DataType": "String", "StringValue": carried}},
        )

        result = redrive(flow.sqs, flow.dlq_url, flow.harness.queue_url, select=RedriveFilter(job_id="backstopped"))

        assert result.moved == 1, result
        [(message_id, outcome)] = flow.deliver().items()
        assert outcome is Outcome.STARTED, "the redriven copy runs its job"
        arn = flow.lease(message_id).execution_arn
        assert arn is not None and flow.wait_for_execution(arn)["status"] == "SUCCEEDED"
