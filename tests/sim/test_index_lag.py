"""The simulated lease table's indexes lag its writes, as AWS's global secondary indexes do: a table's
changes reach them asynchronously, "within a fraction of a second" under normal conditions
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/GSI.html, "Synchronizing data between
tables and global secondary indexes"). Reads of the table itself (consistent, as the engine makes them)
see a write at once."""

from __future__ import annotations

import random
from typing import Any

from longjobs.engine.lease import table_definition
from longjobs.sim.aws import FakeAws
from longjobs.sim.aws.dynamodb import IndexLag
from longjobs.sim.clock import FakeClock

STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"


def lagging(clock: FakeClock, seed: int = 3) -> FakeAws:
    return FakeAws(
        clock,
        random.Random(0),
        table=table_definition("leases"),
        state_machine_arn=STATE_MACHINE_ARN,
        index_lag=IndexLag(1.0, random.Random(seed)),
    )


def waiting(aws: FakeAws, key: str, order: int) -> None:
    aws.dynamodb.put_item(
        TableName="leases",
        Item={"pk": {"S": key}, "waiting_type": {"S": "t"}, "waiting_order": {"N": str(order)}},
    )


def line(aws: FakeAws) -> list[tuple[str, str]]:
    page: dict[str, Any] = aws.dynamodb.query(
        TableName="leases",
        IndexName="waiting",
        KeyConditionExpression="waiting_type = :t",
        ExpressionAttributeValues={":t": {"S": "t"}},
    )
    return [(item["pk"]["S"], item["waiting_order"]["N"]) for item in page["Items"]]


def test_index_lag_a_write_reaches_the_index_within_the_lag_and_the_table_at_once() -> None:
    clock = FakeClock(1_000.0)
    aws = lagging(clock)
    waiting(aws, "m", 5)

    assert aws.dynamodb.get_item(TableName="leases", Key={"pk": {"S": "m"}})["Item"]["waiting_order"] == {"N": "5"}
    assert line(aws) == [], "not in the index yet"
    clock.advance(1.0)
    assert line(aws) == [("m", "5")]


def test_index_lag_writes_of_one_item_reach_the_index_in_their_order() -> None:
    """Each write draws its own delay, yet a later write of an item never reaches the index before an
    earlier one: the index ends with the item as last written, and never goes back to an older version."""
    for seed in range(20):
        clock = FakeClock(1_000.0)
        aws = lagging(clock, seed)
        seen: list[list[tuple[str, str]]] = []
        for order in (1, 2, 3):
            waiting(aws, "m", order)
            clock.advance(0.2)
            seen.append(line(aws))
        clock.advance(1.0)
        assert line(aws) == [("m", "3")]
        versions = [int(found[0][1]) for found in seen if found]
        assert versions == sorted(versions), f"seed {seed}: the index went back to an older write: {seen}"


def test_index_lag_none_is_at_once() -> None:
    aws = FakeAws(
        FakeClock(1_000.0), random.Random(0), table=table_definition("leases"), state_machine_arn=STATE_MACHINE_ARN
    )
    waiting(aws, "m", 5)
    assert line(aws) == [("m", "5")]
