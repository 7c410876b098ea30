"""Visibility client and error classification against responses shaped like real SQS (botocore Stubber)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.stub import Stubber

from longjobs.engine.visibility import FailureClass, VisibilityChange, VisibilityClient, classify, classify_exception
from longjobs.sim.clock import FakeClock

QUEUE = "https://sqs.us-east-1.amazonaws.com/123456789012/jobs"
NOT_A_HANDLE = 'The input receipt handle "AQEBx" is not a valid receipt handle.'
GONE = (
    "Value AQEBx for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available "
    "for visibility timeout change."
)
EXPIRED = "Value AQEBx for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."
BEYOND = (
    "Value 900 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is "
    "beyond the limit [43200 seconds]"
)


@pytest.mark.parametrize(
    ("code", "message", "query_code", "status", "expected"),
    [
        ("ReceiptHandleIsInvalid", NOT_A_HANDLE, "ReceiptHandleIsInvalid", 400, FailureClass.LOST),
        ("MessageNotInflight", "", "AWS.SimpleQueueService.MessageNotInflight;Sender", 400, FailureClass.LOST),
        ("AWS.SimpleQueueService.MessageNotInflight", "Message not inflight", None, None, FailureClass.LOST),
        ("InvalidParameterValue", GONE, None, 400, FailureClass.LOST),
        ("InvalidParameterValue", EXPIRED, None, 400, FailureClass.LOST),
        ("InvalidParameterValue", BEYOND, None, 400, FailureClass.CAPPED),
        # a stale handle answered as a bare ValidationException, without the query-error header
        ("ValidationException", EXPIRED, None, 400, FailureClass.LOST),
        ("ValidationException", GONE, None, 400, FailureClass.LOST),
        ("ValidationException", BEYOND, None, 400, FailureClass.CAPPED),
        ("ValidationException", "1 validation error detected: Value null", None, 400, FailureClass.OTHER),
        (
            "QueueDoesNotExist",
            "The specified queue does not exist.",
            "AWS.SimpleQueueService.NonExistentQueue",
            400,
            FailureClass.LOST,
        ),
        # the short code is generic; only the legacy query code says what happened
        ("InvalidAddress", "", "AWS.SimpleQueueService.NonExistentQueue;Sender", 400, FailureClass.LOST),
        ("RequestThrottled", "Rate exceeded", "AWS.SimpleQueueService.RequestThrottled", 400, FailureClass.THROTTLED),
        ("ThrottlingException", "Rate exceeded", None, 400, FailureClass.THROTTLED),
        ("KmsThrottled", "KMS rate exceeded", "KMS.ThrottlingException", 400, FailureClass.THROTTLED),
        ("InternalError", "We encountered an internal error.", None, 500, FailureClass.THROTTLED),
        ("ServiceUnavailable", "", None, 503, FailureClass.THROTTLED),
        ("SomethingNew", "", None, 502, FailureClass.THROTTLED),
        (
            "InvalidParameterValue",
            "Value 50000 for parameter VisibilityTimeout is invalid. Reason: must be between 0 and 43200.",
            None,
            400,
            FailureClass.OTHER,
        ),
        ("AccessDenied", "not authorized to perform sqs:ChangeMessageVisibility", None, 403, FailureClass.OTHER),
        # the function's credentials expired, not the handle: the text is read only under the generic codes,
        # or the extender would stop every healthy execution it renews as lost
        ("ExpiredToken", "The security token included in the request is expired", None, 400, FailureClass.OTHER),
    ],
)
def test_classify_reads_code_query_code_message_and_status(
    code: str, message: str, query_code: str | None, status: int | None, expected: FailureClass
) -> None:
    assert classify(code, message, query_code=query_code, http_status=status) is expected


def test_classify_exception_covers_network_faults() -> None:
    assert classify_exception(EndpointConnectionError(endpoint_url=QUEUE)) is FailureClass.THROTTLED
    assert classify_exception(ReadTimeoutError(endpoint_url=QUEUE)) is FailureClass.THROTTLED
    assert classify_exception(KeyError("x")) is FailureClass.OTHER


@pytest.fixture
def sqs() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("sqs", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def changes(n: int, vt: int = 300) -> list[VisibilityChange]:
    return [VisibilityChange(f"m{i}", QUEUE, f"handle-{i}", vt) for i in range(n)]


def batch_params(chunk: list[VisibilityChange]) -> dict[str, Any]:
    return {
        "QueueUrl": QUEUE,
        "Entries": [
            {"Id": str(i), "ReceiptHandle": c.receipt_handle, "VisibilityTimeout": c.visibility_timeout_s}
            for i, c in enumerate(chunk)
        ],
    }


def test_batch_failed_entries_are_classified_one_by_one(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    batch = changes(6)
    stubber.add_response(
        "change_message_visibility_batch",
        {
            "Successful": [{"Id": "0"}, {"Id": "5"}],
            "Failed": [
                {"Id": "1", "SenderFault": True, "Code": "ReceiptHandleIsInvalid", "Message": NOT_A_HANDLE},
                {"Id": "2", "SenderFault": True, "Code": "InvalidParameterValue", "Message": GONE},
                {"Id": "3", "SenderFault": True, "Code": "InvalidParameterValue", "Message": BEYOND},
                {"Id": "4", "SenderFault": False, "Code": "InternalError", "Message": "internal error"},
            ],
        },
        batch_params(batch),
    )
    outcomes = VisibilityClient(client, clock=FakeClock(5.0)).change_many(batch)

    assert [o.key for o in outcomes] == [c.key for c in batch]
    assert [o.failure for o in outcomes] == [
        None,
        FailureClass.LOST,
        FailureClass.LOST,
        FailureClass.CAPPED,
        FailureClass.THROTTLED,
        None,
    ]
    assert outcomes[3].error is not None and "beyond the limit" in outcomes[3].error
    assert all(o.sent_at == 5.0 for o in outcomes)


def test_batches_are_chunked_by_ten_per_queue(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    batch = changes(23)
    for start in (0, 10, 20):
        chunk = batch[start : start + 10]
        stubber.add_response(
            "change_message_visibility_batch",
            {"Successful": [{"Id": str(i)} for i in range(len(chunk))], "Failed": []},
            batch_params(chunk),
        )
    outcomes = VisibilityClient(client, clock=FakeClock()).change_many(batch)
    assert len(outcomes) == 23 and all(o.ok for o in outcomes)


def test_throttled_batch_call_marks_every_entry_throttled_without_fallback(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_client_error(
        "change_message_visibility_batch",
        service_error_code="RequestThrottled",
        service_message="Rate exceeded",
        http_status_code=400,
        service_error_meta={"QueryErrorCode": "AWS.SimpleQueueService.RequestThrottled"},
    )
    outcomes = VisibilityClient(client, clock=FakeClock()).change_many(changes(3))
    assert [o.failure for o in outcomes] == [FailureClass.THROTTLED] * 3


def test_visibility_whole_batch_refusal_falls_back_to_single_calls(sqs: tuple[Any, Stubber]) -> None:
    """An emulator fails a whole batch for one capped entry; each entry then gets its own verdict."""
    client, stubber = sqs
    batch = changes(2)
    stubber.add_client_error("change_message_visibility_batch", "InvalidParameterValue", BEYOND)
    stubber.add_client_error("change_message_visibility", "InvalidParameterValue", BEYOND)
    stubber.add_response(
        "change_message_visibility", {}, {"QueueUrl": QUEUE, "ReceiptHandle": "handle-1", "VisibilityTimeout": 300}
    )
    outcomes = VisibilityClient(client, clock=FakeClock()).change_many(batch)
    assert [o.failure for o in outcomes] == [FailureClass.CAPPED, None]


def test_batch_entry_missing_from_the_response_is_not_taken_as_success(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_response("change_message_visibility_batch", {"Successful": [{"Id": "0"}], "Failed": []})
    outcomes = VisibilityClient(client, clock=FakeClock()).change_many(changes(2))
    assert outcomes[0].ok and outcomes[1].failure is FailureClass.OTHER


def test_visibility_single_change_reads_the_query_error_code(sqs: tuple[Any, Stubber]) -> None:
    client, stubber = sqs
    stubber.add_client_error(
        "change_message_visibility",
        service_error_code="MessageNotInflight",
        service_message="",
        service_error_meta={"QueryErrorCode": "AWS.SimpleQueueService.MessageNotInflight"},
    )
    outcome = VisibilityClient(client, clock=FakeClock()).change(changes(1)[0])
    assert outcome.failure is FailureClass.LOST and outcome.error is not None


def test_fifo_expired_handle_is_lost_in_a_batch_entry_and_a_single_call(sqs: tuple[Any, Stubber]) -> None:
    """On a FIFO queue a lapse is final: once the visibility ran out SQS refuses the handle for good."""
    client, stubber = sqs
    fifo_queue = QUEUE + ".fifo"
    batch = [VisibilityChange(f"m{i}", fifo_queue, f"handle-{i}", 300) for i in range(2)]
    stubber.add_response(
        "change_message_visibility_batch",
        {
            "Successful": [{"Id": "1"}],
            "Failed": [{"Id": "0", "SenderFault": True, "Code": "InvalidParameterValue", "Message": EXPIRED}],
        },
        {**batch_params(batch), "QueueUrl": fifo_queue},
    )
    stubber.add_client_error(
        "change_message_visibility",
        service_error_code="InvalidParameterValue",
        service_message=EXPIRED,
        http_status_code=400,
        service_error_meta={"QueryErrorCode": "AWS.SimpleQueueService.InvalidParameterValue"},
    )
    visibility = VisibilityClient(client, clock=FakeClock())

    assert [o.failure for o in visibility.change_many(batch)] == [FailureClass.LOST, None]
    single = visibility.change(batch[0])
    assert single.failure is FailureClass.LOST and single.error is not None and "expired" in single.error


def test_network_failure_of_a_batch_is_transient() -> None:
    class Unreachable:
        def change_message_visibility_batch(self, **_: Any) -> Any:
            raise EndpointConnectionError(endpoint_url=QUEUE)

    outcomes = VisibilityClient(Unreachable(), clock=FakeClock()).change_many(changes(4))  # type: ignore[arg-type]
    assert [o.failure for o in outcomes] == [FailureClass.THROTTLED] * 4


def test_client_error_text_names_code_and_message() -> None:
    error = ClientError({"Error": {"Code": "InvalidParameterValue", "Message": GONE}}, "ChangeMessageVisibility")
    assert classify_exception(error) is FailureClass.LOST
