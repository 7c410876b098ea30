"""A body judged after its lease is read, on moto: a deploy that changes what the receiver accepts (a lower
`max_body_bytes`, a stricter `params_schema`, a job type removed) meets messages whose attempts began
under the checks they passed. A retry of a failed job goes to the DLQ with its `Attempts` history and its
lease is closed REJECTED; a duplicate delivery of a running job is adopted like any other and its
execution runs on; an attempt that never started ends with its message.

AWS semantics the tests rest on:
- a standard queue may deliver a message again while it is in flight ("visibility timeout isn't a
  guarantee against receiving a message twice",
  https://docs.aws.amazon.com/sdk-for-java/v1/developer-guide/examples-sqs-visibility-timeout.html);
- a message has at most 10 message attributes, all counted in its size
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-message-metadata.html):
  the DLQ copy of a message with attempts carries six;
- on a FIFO queue a second send with the same deduplication id within 5 minutes is accepted and not
  delivered (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/FIFO-key-terms.html).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.engine.delivery.types import Delivery, Outcome
from longjobs.engine.extender.service import renew_due
from longjobs.engine.jobs import JobCatalog, load_catalog
from longjobs.engine.lease import Lease, LeaseStatus, job_lock_key
from longjobs.engine.receiver.service import receive
from tests.functional.conftest import Flow, running_flow
from tests.polling import eventually

NAP: dict[str, Any] = {
    "name": "nap",
    "runner": "wait",
    "params_schema": {
        "type": "object",
        "required": ["seconds"],
        "properties": {"seconds": {"type": "integer", "maximum": 600}, "fail": {"type": "boolean"}},
    },
}
STRICTER_NAP: dict[str, Any] = {
    **NAP,
    "params_schema": {**NAP["params_schema"], "required": ["seconds", "owner"]},
}
CATALOG = load_catalog(job_types=[NAP])


def lower_max_body_bytes(flow: Flow) -> str:
    flow.receiver.settings = flow.receiver.settings.model_copy(update={"max_body_bytes": 16})
    return "TooLarge"


def stricter_params_schema(flow: Flow) -> str:
    flow.receiver.catalog = load_catalog(job_types=[STRICTER_NAP])
    return "InvalidParameters"


def type_removed(flow: Flow) -> str:
    flow.receiver.catalog = load_catalog(job_types=[])
    return "UnknownJobType"


CHANGES: dict[str, Callable[[Flow], str]] = {
    "lower-max-body-bytes": lower_max_body_bytes,
    "stricter-params-schema": stricter_params_schema,
    "type-removed": type_removed,
}
"""A deploy between two receives of a message: the receiver's new settings or catalog (the running
executions keep the workflow they started on). Each returns the `ErrorType` the body now gets."""


@pytest.fixture
def flow() -> Iterator[Flow]:
    with running_flow(CATALOG) as made:
        yield made


def send_nap(flow: Flow, job_id: str, **params: Any) -> str:
    return flow.send_job(job_id, "nap", **params)


def make_visible(flow: Flow, handle: str) -> None:
    flow.sqs.change_message_visibility(QueueUrl=flow.harness.queue_url, ReceiptHandle=handle, VisibilityTimeout=0)


def running_and_visible(flow: Flow, job_id: str) -> tuple[str, Lease]:
    """A two-minute nap started, its job running, and its message handed out again by SQS meanwhile: its
    message id and the lease of the receive that started it."""
    message_id = send_nap(flow, job_id, seconds=120)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    first = flow.lease(message_id)
    assert first.execution_arn is not None
    flow.wait_for_job(first.execution_arn)
    make_visible(flow, first.receipt_handle)
    return message_id, first


def attributes(message: dict[str, Any]) -> dict[str, str]:
    return {name: value["StringValue"] for name, value in message["MessageAttributes"].items()}


def name(arn: str) -> str:
    """An execution's name, as a history names its attempt's execution."""
    return arn.rpartition(":")[2]


def deliver_again(flow: Flow) -> dict[str, Outcome]:
    """The next poll that receives something (a released message shows again after its delay)."""
    return dict(eventually(flow.deliver, "the message received again", timeout_s=30))


def failed_once(flow: Flow, job_id: str, catalog: JobCatalog | None = None) -> tuple[str, str]:
    """A job whose first attempt failed: its lease RELEASED, its message back on the queue."""
    message_id = send_nap(flow, job_id, seconds=0, fail=True)
    assert flow.deliver() == {message_id: Outcome.STARTED}
    arn = flow.lease(message_id).execution_arn
    assert arn is not None
    assert flow.wait_for_execution(arn)["status"] == "FAILED"
    assert flow.lease(message_id).status is LeaseStatus.RELEASED
    return message_id, arn


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_receiver_a_retry_whose_body_a_deploy_made_invalid_goes_to_the_dlq_with_its_history(
    flow: Flow, change: str
) -> None:
    message_id, arn = failed_once(flow, f"retry-{change}")
    error_type = CHANGES[change](flow)

    assert deliver_again(flow) == {message_id: Outcome.REJECTED}

    [dead] = flow.dlq_messages()
    got = attributes(dead)
    assert got["ErrorType"] == error_type
    assert got["OriginalMessageId"] == message_id
    assert len(dead["MessageAttributes"]) <= 10, "SQS's limit on a message's attributes"
    [attempt] = json.loads(got["Attempts"])
    assert attempt["execution"] == name(arn) and attempt["error"].startswith("WaitJobFailed")
    rejected = flow.lease(message_id)
    assert rejected.status is LeaseStatus.REJECTED, "closed, not left RELEASED"
    assert [a.execution for a in rejected.history] == [name(arn)]
    assert rejected.last_error is not None and rejected.last_error.error == error_type
    assert flow.harness.visible_messages() == [], "deleted once in the DLQ"


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_receiver_a_duplicate_delivery_of_a_running_job_whose_body_a_deploy_made_invalid_is_adopted(
    flow: Flow, change: str
) -> None:
    message_id, first = running_and_visible(flow, f"runs-{change}")
    CHANGES[change](flow)

    assert flow.deliver() == {message_id: Outcome.RUNNING}, "deferred like any redelivery of a running job"

    assert flow.dlq_messages() == []
    adopted = flow.lease(message_id)
    assert adopted.status is LeaseStatus.ACTIVE and adopted.receive_count == 2
    assert adopted.receipt_handle != first.receipt_handle, "the newer handle, which the extender renews"

    def renewed() -> bool:
        renew_due(flow.extender, deadline=time.time() + 1)
        lease = flow.lease(message_id)
        assert lease.status is LeaseStatus.ACTIVE, f"the extender closed it {lease.status}: {lease.last_error}"
        return lease.last_renewed_at > adopted.last_renewed_at

    eventually(renewed, "the extender renews the adopted handle", timeout_s=30)
    described = flow.harness.stepfunctions.describe_execution(executionArn=first.execution_arn)
    assert described["status"] == "RUNNING"


def test_receiver_a_running_wait_redelivered_after_a_deploy_lowered_max_renewal_s_is_adopted(flow: Flow) -> None:
    """A wait that fit renewal when its attempt began, received again after a deploy lowered `max_renewal_s`
    below its seconds: the receiver now refuses such a wait on a first receive, but this attempt runs, so the
    redelivery is adopted and deferred, never dead-lettered while its execution runs."""
    message_id, first = running_and_visible(flow, "runs-lowered-renewal")
    flow.receiver.settings = flow.receiver.settings.model_copy(update={"max_renewal_s": 60})

    assert flow.deliver() == {message_id: Outcome.RUNNING}

    assert flow.dlq_messages() == []
    assert flow.lease(message_id).status is LeaseStatus.ACTIVE
    described = flow.harness.stepfunctions.describe_execution(executionArn=first.execution_arn)
    assert described["status"] == "RUNNING"


class Crash(BaseException):
    """The Lambda dies here: no code of ours runs after it."""


def never_started(flow: Flow, monkeypatch: pytest.MonkeyPatch, job_id: str) -> tuple[str, Delivery]:
    """A job whose receive wrote its lease and hid it, then died before StartExecution."""
    message_id = send_nap(flow, job_id, seconds=1)
    with monkeypatch.context() as patch:

        def crash(**kwargs: Any) -> Any:
            raise Crash

        patch.setattr(flow.receiver.stepfunctions, "start_execution", crash)
        [delivery] = flow.receive_batch()
        with pytest.raises(Crash):
            receive(flow.receiver, delivery)
    assert flow.lease(message_id).active and flow.executions() == []
    return message_id, delivery


@pytest.mark.parametrize("again", ["redelivery", "same-receive"])
def test_receiver_an_attempt_that_never_started_ends_with_its_message_once_its_body_is_invalid(
    flow: Flow, monkeypatch: pytest.MonkeyPatch, again: str
) -> None:
    message_id, delivery = never_started(flow, monkeypatch, f"unstarted-{again}")
    stricter_params_schema(flow)

    if again == "redelivery":
        make_visible(flow, delivery.receipt_handle)
        assert flow.deliver() == {message_id: Outcome.REJECTED}
    else:  # the same record handled once more (the lease names this very receive)
        assert receive(flow.receiver, delivery) is Outcome.REJECTED

    [dead] = flow.dlq_messages()
    assert attributes(dead)["ErrorType"] == "InvalidParameters"
    assert json.loads(attributes(dead)["Attempts"]) == [], "its history: no attempt ran"
    rejected = flow.lease(message_id)
    assert rejected.status is LeaseStatus.REJECTED and rejected.history == ()
    assert flow.executions() == [], "nothing started"
    lock = flow.receiver.store.locks.get(job_lock_key(f"unstarted-{again}"))
    assert lock is not None and not lock.held, "its job lock freed with the lease"


def test_receiver_two_duplicates_of_a_running_job_at_once_are_both_deferred(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two receives of a running job's message with a body now invalid, handled at once: the older one's
    adoption loses to the newer one's, reads again and is stale; neither is dead-lettered."""
    message_id, _ = running_and_visible(flow, "twice")
    [older] = flow.receive_batch()
    make_visible(flow, older.receipt_handle)
    [newer] = flow.receive_batch()
    type_removed(flow)
    outcomes: dict[str, Outcome] = {}
    real = flow.receiver.store.refresh_handle
    interleaved: list[str] = []

    def newer_first(current: Any, adopted: Any) -> Any:
        if not interleaved:  # the older receive, between its read and its adoption
            interleaved.append(older.receipt_handle)
            outcomes["newer"] = receive(flow.receiver, newer)
        return real(current, adopted)

    monkeypatch.setattr(flow.receiver.store, "refresh_handle", newer_first)
    outcomes["older"] = receive(flow.receiver, older)

    assert outcomes == {"newer": Outcome.RUNNING, "older": Outcome.STALE}
    assert flow.dlq_messages() == []
    lease = flow.lease(message_id)
    assert lease.active and lease.receipt_handle == newer.receipt_handle


def send_lands_then_5xx(flow: Flow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DLQ's SendMessage lands, and its answer is a 500 (the client sees an error)."""
    real = flow.receiver.sqs.send_message

    def send(**kwargs: Any) -> Any:
        real(**kwargs)
        monkeypatch.setattr(flow.receiver.sqs, "send_message", real)
        raise ClientError({"Error": {"Code": "InternalError", "Message": "internal"}}, "SendMessage")

    monkeypatch.setattr(flow.receiver.sqs, "send_message", send)


def test_receiver_a_dlq_send_answered_5xx_fails_the_record_and_its_retry_ends_it_with_its_history(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The send is claimed on the message's record first (DEAD_LETTERING, `dlq_claim`); its 5xx gives the
    claim up and fails the record, which stays on the queue. The retry sends it again at once, so a standard
    DLQ holds a second copy (both with the history); nothing is lost and no execution is touched."""
    message_id, arn = failed_once(flow, "five-hundred")
    lower_max_body_bytes(flow)
    [delivery] = eventually(flow.receive_batch, "the released message", timeout_s=30)
    send_lands_then_5xx(flow, monkeypatch)

    with pytest.raises(ClientError):
        receive(flow.receiver, delivery)
    claimed = flow.lease(message_id)
    assert (claimed.status, claimed.claimed_at, claimed.copy_id) == (LeaseStatus.DEAD_LETTERING, None, None)

    make_visible(flow, delivery.receipt_handle)  # the record failed: SQS hands it out again
    assert flow.deliver() == {message_id: Outcome.REJECTED}
    copies = flow.dlq_messages()
    assert len(copies) == 2
    assert all(json.loads(attributes(c)["Attempts"])[0]["execution"] == name(arn) for c in copies)
    noted = flow.lease(message_id)
    assert noted.status is LeaseStatus.REJECTED and noted.copy_id in {c["MessageId"] for c in copies}


def test_fifo_a_retry_whose_body_is_now_invalid_leaves_one_dlq_copy_after_a_5xx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On FIFO the DLQ copy's deduplication id is the message id: the retry after a send answered 5xx is
    accepted and not delivered, and the copy that landed carries the history."""
    with running_flow(CATALOG, fifo=True) as fifo:
        body = json.dumps({"job_id": "fifo-retry", "type": "nap", "params": {"seconds": 0, "fail": True}})
        message_id = fifo.sqs.send_message(QueueUrl=fifo.harness.queue_url, MessageBody=body, MessageGroupId="g")[
            "MessageId"
        ]
        assert fifo.deliver() == {message_id: Outcome.STARTED}
        arn = fifo.lease(message_id).execution_arn
        assert arn is not None and fifo.wait_for_execution(arn)["status"] == "FAILED"
        stricter_params_schema(fifo)
        [delivery] = eventually(fifo.receive_batch, "the released message", timeout_s=30)
        send_lands_then_5xx(fifo, monkeypatch)
        with pytest.raises(ClientError):
            receive(fifo.receiver, delivery)
        make_visible(fifo, delivery.receipt_handle)

        assert deliver_again(fifo) == {message_id: Outcome.REJECTED}

        [dead] = fifo.dlq_messages()
        assert attributes(dead)["ErrorType"] == "InvalidParameters"
        assert [a["execution"] for a in json.loads(attributes(dead)["Attempts"])] == [name(arn)]
        assert fifo.lease(message_id).status is LeaseStatus.REJECTED


def test_receiver_an_invalid_body_whose_lease_cannot_be_read_is_not_dead_lettered(
    flow: Flow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether an execution runs for the message is not known: the record fails (SQS hands it out again)
    rather than take a running job's message to the DLQ."""
    message_id = flow.harness.send("{not json")
    [delivery] = flow.receive_batch()

    def unreadable(message_id: str) -> Any:
        raise ClientError({"Error": {"Code": "InternalServerError", "Message": "internal"}}, "GetItem")

    monkeypatch.setattr(flow.receiver.store, "get", unreadable)
    with pytest.raises(ClientError):
        receive(flow.receiver, delivery)
    assert flow.dlq_messages() == []
    monkeypatch.undo()

    make_visible(flow, delivery.receipt_handle)
    assert flow.deliver() == {message_id: Outcome.REJECTED}
    assert attributes(flow.dlq_messages()[0])["ErrorType"] == "NotJson"
