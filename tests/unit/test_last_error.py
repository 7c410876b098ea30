"""The lease's last error: a map `{"Error", "Cause"}` in the table (what the workflow writes), read back as
`LastError`; the plain strings of items written before the map still read, and the DLQ's reason names the
cause within its attribute's limit."""

from __future__ import annotations

import json
from typing import Any

import pytest

from longjobs.engine.delivery.dlq import ERROR_MESSAGE_MAX, exhausted_attributes
from longjobs.engine.delivery.types import Delivery
from longjobs.engine.lease import LastError, Lease, LeaseStatus
from longjobs.engine.lease.codec import item_to_lease, lease_to_item
from longjobs.engine.lease.types import Attempt

CAUSE = "[PATH_NOT_FOUND] Path does not exist: file:/data/raw/date=2026-11-20"


def closed_lease(last_error: LastError | None) -> Lease:
    return Lease(
        message_id="m-1",
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        receipt_handle="handle",
        receive_count=1,
        received_at=1_800_000_000.0,
        visible_until=1_800_000_000.0,
        renew_until=1_800_003_600.0,
        status=LeaseStatus.RELEASED,
        last_error=last_error,
    )


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ("execution never started", LastError("execution never started")),  # an item written before the map
        ({"Error": "AnalysisException", "Cause": CAUSE}, LastError("AnalysisException", CAUSE)),
        ({"Error": "WaitJobFailed"}, LastError("WaitJobFailed")),  # a failure sent without a cause
        ({"Error": "WaitJobFailed", "Cause": ""}, LastError("WaitJobFailed")),  # Step Functions' empty cause
        (None, None),
    ],
)
def test_last_error_last_error_reads_the_map_and_the_legacy_string(stored: Any, read: LastError | None) -> None:
    assert LastError.from_data(stored) == read


def test_last_error_last_error_refuses_what_is_no_last_error() -> None:
    with pytest.raises(ValueError, match="not a last error"):
        LastError.from_data({"Cause": "no name"})


def test_last_error_last_error_reads_as_its_name_and_cause() -> None:
    assert str(LastError("AnalysisException", CAUSE)) == f"AnalysisException: {CAUSE}"
    assert str(LastError("execution never started")) == "execution never started"


def test_lease_item_holds_the_last_error_as_a_map_and_reads_it_back() -> None:
    with_cause = lease_to_item(closed_lease(LastError("AnalysisException", CAUSE)), shard=0)
    without_cause = lease_to_item(closed_lease(LastError("WaitJobFailed")), shard=0)

    assert with_cause["last_error"] == {"M": {"Error": {"S": "AnalysisException"}, "Cause": {"S": CAUSE}}}
    assert without_cause["last_error"] == {"M": {"Error": {"S": "WaitJobFailed"}}}
    assert item_to_lease(with_cause).last_error == LastError("AnalysisException", CAUSE)
    assert item_to_lease(without_cause).last_error == LastError("WaitJobFailed")
    assert "last_error" not in lease_to_item(closed_lease(None), shard=0)


def test_lease_item_of_a_deployed_table_with_a_string_still_reads() -> None:
    item = lease_to_item(closed_lease(None), shard=0)
    item["last_error"] = {"S": '{"Error":"WaitJobFailed","Cause":"asked to"}'}  # the workflow's old JSON
    item["attempts"] = {"S": json.dumps([{"attempt": 1, "execution": "m-1-1", "outcome": "LOST", "error": "gone"}])}

    lease = item_to_lease(item)

    assert lease.last_error == LastError('{"Error":"WaitJobFailed","Cause":"asked to"}')
    assert lease.history[0].error == LastError("gone")


def test_attempt_history_keeps_each_error_as_a_map() -> None:
    attempt = Attempt(1, "m-1-1", "RELEASED", LastError("AnalysisException", CAUSE), 1_800_000_060.0)

    assert attempt.to_data()["error"] == {"Error": "AnalysisException", "Cause": CAUSE}
    assert Attempt.from_data(attempt.to_data()) == attempt


def test_dlq_reason_names_the_last_attempts_cause_cut_to_the_attribute_limit() -> None:
    delivery = Delivery("m-1", "handle", "{}", 2, "arn:aws:sqs:us-east-1:123456789012:jobs")
    long_cause = CAUSE + " at " + "frame\n" * 1_000
    history = (Attempt(1, "m-1-1", "RELEASED", LastError("AnalysisException", long_cause), 1_800_000_060.0),)

    attributes = exhausted_attributes(delivery, history)

    message = attributes["ErrorMessage"]["StringValue"]
    assert message.startswith(f"AnalysisException: {CAUSE}") and len(message) == ERROR_MESSAGE_MAX
    [entry] = json.loads(attributes["Attempts"]["StringValue"])
    assert entry["error"].startswith(f"AnalysisException: {CAUSE}")
