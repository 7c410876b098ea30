"""Probes: small races on the simulated AWS, each one named for the mutant it reports.

Some weakenings change only what a later race would meet, and the campaign's workload makes that race
rarely or never. A probe makes it directly, with the engine's own store on the simulated table and a fake
clock, and fails (`AssertionError`) when the protocol is weakened. Each passes on the real protocol; the
mutation command runs a mutant's probe when the campaign did not report it, and the tests hold every probe
to both halves (tests/sim/test_mutation.py).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from botocore.exceptions import ClientError

from longjobs.engine import cancel
from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore, table_definition
from longjobs.engine.lease.lock import Locks
from longjobs.engine.lease.renewals import Renewal
from longjobs.engine.lease.writes import is_conditional_failure
from longjobs.engine.settle import settle_ended
from longjobs.engine.visibility import VisibilityClient
from longjobs.sim.aws import FakeAws
from longjobs.sim.campaign import deployed_workflow
from longjobs.sim.clock import FakeClock
from longjobs.sim.workflow import ExecutionContext, resolve

__all__ = ["PROBES"]

START = 1_700_000_000.0
TABLE = "leases"
EXECUTION = "arn:aws:states:us-east-1:123456789012:execution:long-jobs:m-1"


def _store() -> tuple[FakeClock, LeaseStore]:
    clock, _, store = _world()
    return clock, store


def _world() -> tuple[FakeClock, FakeAws, LeaseStore]:
    clock = FakeClock(START)
    aws = FakeAws(clock, random.Random(0), table=table_definition(TABLE), state_machine_arn="arn:sm")
    return clock, aws, LeaseStore(aws.dynamodb, TABLE, shards=1, closed_ttl_s=86_400)  # type: ignore[arg-type]


def _active(message_id: str, queue_url: str, handle: str) -> Lease:
    """The ACTIVE lease of a first receive at `START`, its execution running, due for renewal in 240 s."""
    return Lease(
        message_id=message_id,
        queue_url=queue_url,
        receipt_handle=handle,
        receive_count=1,
        received_at=START,
        visible_until=START + 300,
        renew_until=START + 43_000,
        renew_at=START + 240,
        execution_arn=EXECUTION,
    )


def lock_released_once() -> None:
    """A lock freed twice by its execution (a retried release, the workflow's and the receiver's) keeps the
    first release's time: admission estimates a slot's next wait from how long its holder held it."""
    clock, store = _store()
    locks: Locks = store.locks
    assert locks.take("job#j", holder="m-1", execution_arn=EXECUTION, now=clock.now(), hold_until=START + 3600)
    clock.advance(600)
    assert locks.release("job#j", EXECUTION, now=clock.now())
    clock.advance(900)
    assert not locks.release("job#j", EXECUTION, now=clock.now()), "a free lock was released again"
    freed = locks.get("job#j")
    assert freed is not None and freed.held_for_s == 600, f"the holding's duration became {freed}"


def stale_holding_freed_once() -> None:
    """A stale holding freed by two sweeps keeps the first one's time (as `lock_released_once`)."""
    clock, store = _store()
    locks: Locks = store.locks
    assert locks.take("slot#t#0", holder="m-1", execution_arn=EXECUTION, now=clock.now(), hold_until=START + 60)
    held = locks.get("slot#t#0")
    assert held is not None
    clock.advance(300)
    assert locks.free(held, now=clock.now())
    clock.advance(300)
    assert not locks.free(held, now=clock.now()), "a free holding was freed again"
    freed = locks.get("slot#t#0")
    assert freed is not None and freed.held_for_s == 300, f"the holding's duration became {freed}"


def workflow_slot_released_once() -> None:
    """The workflow frees its slot once: a second release (its step-by-step path after a transaction that
    freed the slot landed unanswered) is refused and keeps the first release's time, as
    `lock_released_once`. The request is the deployed workflow's own, filled as its state would fill it."""
    clock, aws, store = _world()
    slot = "slot#t#0"
    assert store.locks.take(slot, holder="m-1", execution_arn=EXECUTION, now=clock.now(), hold_until=START + 3600)
    template = _slot_release(deployed_workflow().definition)

    def release(at: float) -> bool:
        context = ExecutionContext(EXECUTION, START, entered=at).as_json()
        request = {**resolve(template, {"self": {"execution": EXECUTION}, "slot": slot}, context), "TableName": TABLE}
        try:
            aws.dynamodb.update_item(**request)
        except ClientError as exc:
            assert is_conditional_failure(exc), exc
            return False
        return True

    assert release(START + 600)
    assert not release(START + 1500), "a free slot was released again"
    freed = store.locks.get(slot)
    assert freed is not None and freed.held_for_s == 600, f"the holding's duration became {freed}"


def workflow_frees_only_its_own_holding() -> None:
    """The workflow frees a slot only while it holds it: after its first release landed unanswered, another
    execution took the free slot, and the release's retry (Step Functions retries a throttled or failed
    task) must leave that holding alone, or a third execution could take the slot while the second runs.
    The request is the deployed workflow's own, as in `workflow_slot_released_once`."""
    clock, aws, store = _world()
    slot, other = "slot#t#0", EXECUTION.replace(":m-1", ":m-2")
    assert store.locks.take(slot, holder="m-2", execution_arn=other, now=clock.now(), hold_until=START + 3600)
    template = _slot_release(deployed_workflow().definition)
    context = ExecutionContext(EXECUTION, START, entered=START + 60).as_json()
    request = {**resolve(template, {"self": {"execution": EXECUTION}, "slot": slot}, context), "TableName": TABLE}
    try:
        aws.dynamodb.update_item(**request)
    except ClientError as exc:
        assert is_conditional_failure(exc), exc
    held = store.locks.get(slot)
    assert held is not None and held.held and held.execution_arn == other, f"another's holding became {held}"


def _slot_release(definition: Mapping[str, Any]) -> Mapping[str, Any]:
    """The parameters of the workflow's slot release (the update that notes when the slot was freed)."""
    return _parameters(
        definition,
        lambda parameters: (
            parameters.get("ConditionExpression") == "#state = :held AND #execution = :self"
            and "#released" in parameters.get("UpdateExpression", "")
            and "$.slot" in json.dumps(parameters.get("Key"))  # not the job lock's release, which notes it too
        ),
    )


def _parameters(definition: Mapping[str, Any], chosen: Callable[[Mapping[str, Any]], bool]) -> Mapping[str, Any]:
    """The parameters of the workflow's first Task whose parameters `chosen` picks, its branches searched."""
    found: list[Mapping[str, Any]] = []

    def walk(states: Mapping[str, Any]) -> None:
        for state in states.values():
            if chosen(state.get("Parameters", {})):
                found.append(state["Parameters"])
            for branch in state.get("Branches", []):
                walk(branch["States"])

    walk(definition["States"])
    assert found, "the workflow sends no such request"
    return found[0]


def workflow_marks_only_its_own_release_lost() -> None:
    """The workflow marks its lease LOST (the release's visibility change refused for good) only over its own
    release: a lease an operator cancelled since, or one a newer attempt released, keeps its status. A cancel's
    mark over the release is final (`cancelled_never_succeeds` refuses LOST over it)."""
    clock, aws, store = _world()
    template = _parameters(
        deployed_workflow().definition,
        lambda parameters: parameters.get("ConditionExpression") == "#execution = :self AND #status = :released",
    )
    first = _active("m-1", "q", "h1")
    assert store.create(first)
    cancelled = store.close(first, LeaseStatus.RELEASED, now=clock.now())
    assert cancelled is not None
    reason = LastError("cancelled", "by an operator")
    assert cancel.mark_cancelled(store, cancelled, now=clock.now(), error=reason, record={}) is not None
    newer = replace(_active("m-2", "q", "h2"), execution_arn=EXECUTION + "-2")
    assert store.create(newer) and store.close(newer, LeaseStatus.RELEASED, now=clock.now()) is not None
    context = ExecutionContext(EXECUTION, START, entered=clock.now()).as_json()
    error = {"Error": {"S": "receipt handle no longer accepted"}}  # as the workflow writes `$.last_error`
    for message_id, status in (("m-1", LeaseStatus.CANCELLED), ("m-2", LeaseStatus.RELEASED)):
        data = {"self": {"execution": EXECUTION}, "message_id": message_id, "last_error": error}
        try:
            aws.dynamodb.update_item(**{**resolve(template, data, context), "TableName": TABLE})
        except ClientError as exc:
            assert is_conditional_failure(exc), exc
        stored = store.get(message_id)
        assert stored is not None and stored.status is status, f"{message_id} became {stored}"


def workflow_releases_only_the_receive_it_read() -> None:
    """The failure path closes its lease RELEASED only while it names the handle the path read: a redelivery
    that adopted the execution since wrote a newer one, and releasing that lease would end the adopting
    receive's hold by a handle no longer the message's."""
    clock, aws, store = _world()
    template = _parameters(
        deployed_workflow().definition,
        lambda parameters: (
            parameters.get("ConditionExpression") == "#execution = :self AND #handle = :handle AND #status = :active"
        ),
    )
    assert store.create(replace(_active("m-1", "q", "h2"), receive_count=2))  # adopted: a newer handle
    context = ExecutionContext(EXECUTION, START, entered=clock.now()).as_json()
    data = {
        "self": {"execution": EXECUTION},
        "message_id": "m-1",
        "lease": {"Item": {"receipt_handle": {"S": "h1"}}},  # as the path read it, before the adoption
        "last_error": {"Error": {"S": "WaitJobFailed"}},
    }
    try:
        aws.dynamodb.update_item(**{**resolve(template, data, context), "TableName": TABLE})
    except ClientError as exc:
        assert is_conditional_failure(exc), exc
    stored = store.get("m-1")
    assert stored is not None and stored.status is LeaseStatus.ACTIVE, f"the adopted lease became {stored}"


def renewal_recorded_once() -> None:
    """A renewal whose write landed with its answer lost is not recorded again by its retry: the lease counts
    one renewal, at the version the extender believes."""
    _, store = _store()
    lease = _active("m-1", "q", "h1")
    assert store.create(lease)
    renewal = Renewal(lease, sent_at=START + 240, visibility_timeout_s=600, renew_at=START + 780)
    assert store.renewals.record(renewal) is not None
    assert store.renewals.record(renewal) is None, "the same renewal was recorded twice"
    stored = store.get("m-1")
    assert stored is not None and stored.renewal_count == 1 and stored.version == lease.version + 1, stored
    assert stored.status is LeaseStatus.ACTIVE


def succeeded_execution_completed() -> None:
    """An ACTIVE lease whose execution ended SUCCEEDED (the workflow's own close was lost) is completed by
    reconciliation: its message deleted and its lease SUCCEEDED. Released instead, the message would show
    again and be received once more for a job that is done."""
    clock, aws, store = _world()
    queue = aws.sqs.create_queue("jobs", visibility_timeout_s=300)
    aws.sqs.put(queue, "{}")
    received = aws.sqs.receive_message(QueueUrl=queue.url, AttributeNames=["All"])["Messages"][0]
    lease = _active(received["MessageId"], queue.url, received["ReceiptHandle"])
    assert store.create(lease)
    settled = settle_ended(
        lease,
        "SUCCEEDED",
        store=store,
        visibility=VisibilityClient(aws.sqs, clock=clock),  # type: ignore[arg-type]
        sqs=aws.sqs,  # type: ignore[arg-type]
        clock=clock,
    )
    assert settled is not None and settled.status is LeaseStatus.SUCCEEDED, f"a succeeded job settled as {settled}"
    assert not queue.messages, "the message of a job that succeeded was left on the queue"


PROBES: dict[str, Callable[[], None]] = {
    "#state = :held AND #execution = :arn | without #state = :held": lock_released_once,
    "#state = :held AND #execution = :arn AND #acquired = :acquired | without #state = :held": (
        stale_holding_freed_once
    ),
    "version = :version AND #status = :status | without version = :version": renewal_recorded_once,
    "#state = :held AND #execution = :self | without #state = :held": workflow_slot_released_once,
    "#state = :held AND #execution = :self | without #execution = :self": workflow_frees_only_its_own_holding,
    "#execution = :self AND #handle = :handle AND #status = :active | without #handle = :handle": (
        workflow_releases_only_the_receive_it_read
    ),
    "#execution = :self AND #status = :released | without #execution = :self": (
        workflow_marks_only_its_own_release_lost
    ),
    "#execution = :self AND #status = :released | without #status = :released": (
        workflow_marks_only_its_own_release_lost
    ),
    "longjobs.engine.settle:settle_ended #1: (status == 'SUCCEEDED') -> False": succeeded_execution_completed,
}
"""The probe of each mutant it reports, by `longjobs.sim.mutation.equivalent.key`."""
