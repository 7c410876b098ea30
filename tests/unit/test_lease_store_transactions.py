"""Batched renewal writes against DynamoDB's real cancellation shapes (botocore Stubber)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from longjobs.engine.lease import Lease, LeaseStatus, LeaseStore, Renewal
from longjobs.engine.lease.markers import CopyNote

NOW = 1_800_000_000.0


def renewal(i: int) -> Renewal:
    lease = Lease(
        message_id=f"m-{i}",
        queue_url="q",
        receipt_handle=f"h-{i}",
        receive_count=1,
        received_at=NOW,
        visible_until=NOW + 301,
        renew_until=NOW + 43_140,
        renew_at=NOW + 1,
    )
    return Renewal(lease, sent_at=NOW + 2, visibility_timeout_s=301, renew_at=NOW + 3)


@pytest.fixture
def dynamodb() -> Iterator[tuple[Any, Stubber]]:
    client = boto3.client("dynamodb", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def cancelled(stubber: Stubber, reasons: list[dict[str, str]]) -> None:
    codes = ", ".join(r["Code"] for r in reasons)
    stubber.add_client_error(
        "transact_write_items",
        service_error_code="TransactionCanceledException",
        service_message=f"Transaction cancelled, please refer cancellation reasons for specific reasons [{codes}]",
        http_status_code=400,
        modeled_fields={"CancellationReasons": reasons},
    )


def transact_items(count: int) -> dict[str, Any]:
    return {"TransactItems": [ANY] * count}


def test_cancelled_transaction_retries_the_items_that_did_not_lose(dynamodb: tuple[Any, Stubber]) -> None:
    client, stubber = dynamodb
    cancelled(
        stubber,
        [
            {"Code": "None"},
            {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"},
            {"Code": "None"},
        ],
    )
    stubber.add_response("transact_write_items", {}, transact_items(2))

    store = LeaseStore(client, "leases", shards=1, closed_ttl_s=60)
    results = store.renewals.record_many([renewal(i) for i in range(3)])

    assert [r is None for r in results] == [False, True, False]
    assert results[0] is not None and results[0].visible_until == NOW + 303 and results[0].version == 1


def test_transaction_conflicts_are_retried_then_written_one_by_one(dynamodb: tuple[Any, Stubber]) -> None:
    client, stubber = dynamodb
    for _ in range(3):  # every attempt cancelled by a concurrent transaction on the second item
        cancelled(stubber, [{"Code": "None"}, {"Code": "TransactionConflict", "Message": "Transaction is ongoing"}])
    stubber.add_response("update_item", {})
    stubber.add_client_error("update_item", service_error_code="ConditionalCheckFailedException")

    results = LeaseStore(client, "leases", shards=1, closed_ttl_s=60).renewals.record_many([renewal(0), renewal(1)])

    assert results[0] is not None and results[1] is None


def test_lease_store_other_transaction_errors_are_raised_not_swallowed(dynamodb: tuple[Any, Stubber]) -> None:
    client, stubber = dynamodb
    stubber.add_client_error("transact_write_items", service_error_code="ValidationException", service_message="bad")
    with pytest.raises(Exception, match="ValidationException"):
        LeaseStore(client, "leases", shards=1, closed_ttl_s=60).renewals.record_many([renewal(0)])


def copy_note(i: int) -> CopyNote:
    marker = replace(renewal(i).lease, status=LeaseStatus.PARKED, version=3)
    return CopyNote(marker, f"copy-{i}", sent_at=NOW, kept_until=NOW + 1_209_600)


def test_copy_notes_go_in_one_transaction_and_a_marker_changed_meanwhile_is_not_noted(
    dynamodb: tuple[Any, Stubber],
) -> None:
    """A batch's parked copies are noted together, each conditional on its marker's version: a marker a
    cancel changed meanwhile is refused (False), the others are sent again and noted."""
    client, stubber = dynamodb
    cancelled(
        stubber, [{"Code": "ConditionalCheckFailed", "Message": "The conditional request failed"}, {"Code": "None"}]
    )
    stubber.add_response("transact_write_items", {}, transact_items(1))

    noted = LeaseStore(client, "leases", shards=1, closed_ttl_s=60).markers.note_copies([copy_note(0), copy_note(1)])

    assert noted == [False, True]


def test_lease_store_one_copy_note_is_one_update(dynamodb: tuple[Any, Stubber]) -> None:
    client, stubber = dynamodb
    stubber.add_response("update_item", {})
    assert LeaseStore(client, "leases", shards=1, closed_ttl_s=60).markers.note_copies([copy_note(0)]) == [True]
