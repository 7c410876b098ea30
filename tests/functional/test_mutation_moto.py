"""The mutation command's clauses on moto (`longjobs.sim.mutation.named`): a clause removed where moto evaluates a
condition lets a write land that the whole condition refuses, and the recorder names the clause that alone
refused it. The request is still checked as sent: moto refuses a name the condition does not use."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from longjobs.sim.mutation import ClauseMutant, named
from tests.functional.conftest import TABLE, Harness

SITE = "#state = :held AND #holder = :self"
"""A condition the processor never sends, so no mutant of its own conditions is judged by these tests."""


def _release(dynamodb: Any) -> None:
    dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": "lock-1"}},
        UpdateExpression="SET #state = :free",
        ConditionExpression=SITE,
        ExpressionAttributeNames={"#state": "state", "#holder": "holder"},
        ExpressionAttributeValues={":held": {"S": "held"}, ":self": {"S": "e-1"}, ":free": {"S": "free"}},
    )


def _freed_lock(dynamodb: Any) -> None:
    item = {"pk": {"S": "lock-1"}, "state": {"S": "free"}, "holder": {"S": "e-1"}}
    dynamodb.put_item(TableName=TABLE, Item=item)


def test_mutation_moto_clause_removed_lets_the_refused_write_land(harness: Harness) -> None:
    _freed_lock(harness.dynamodb)
    with pytest.raises(ClientError, match="ConditionalCheckFailed"):
        _release(harness.dynamodb)
    # the holder's clause removed: the state's still refuses
    with named._clause_removed(ClauseMutant(SITE, 1)), pytest.raises(ClientError, match="ConditionalCheckFailed"):
        _release(harness.dynamodb)
    with named._clause_removed(ClauseMutant(SITE, 0)):
        _release(harness.dynamodb)


def test_mutation_moto_recorder_names_the_clause_that_alone_refused(harness: Harness) -> None:
    _freed_lock(harness.dynamodb)
    with named._clauses_recorded([SITE]) as hit, pytest.raises(ClientError, match="ConditionalCheckFailed"):
        _release(harness.dynamodb)
    assert hit == {ClauseMutant(SITE, 0)}
