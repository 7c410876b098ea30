"""A deploy that removes a type's concurrency limit while messages of the type are parked.

The type keeps its waiting queue (every type of a standard queue has one), so nothing in it is lost; the
extender's pass receives what is there and starts it, as any message of an unlimited type
(docs/deploy.md, "Changing which types are limited"). Driven step by step on the fake AWS (`Bench`)."""

from __future__ import annotations

from dataclasses import replace

from longjobs.engine.admission.admit import UNLIMITED_POLL_S, extender_pass
from longjobs.engine.delivery.types import Outcome
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.receiver.service import receive
from tests.sim.test_retention import Bench, bench, parked_behind_a_full_type


def deploy_without_the_limit(b: Bench) -> None:
    """The stack deployed with the `wait` type's limit removed: its waiting queue stays, in the settings
    too; the catalog has no limit for it."""
    b.receiver = replace(b.receiver, catalog=JobCatalog(BUILTIN_TYPES))


def test_admission_parked_message_of_a_type_whose_limit_was_removed_starts_at_the_next_pass() -> None:
    b, _, filler, _ = parked_behind_a_full_type()
    assert b.waiting_ids() != []
    deploy_without_the_limit(b)
    pass_ = extender_pass(b.receiver, handle=receive)

    pass_(float("inf"))
    assert len(b.executions_of("X")) == 1, "it started without a slot: its type has no limit now"
    lease = b.receiver.store.get(b.waiting_ids()[0])
    assert lease is not None and lease.active and lease.queue_url == b.waiting_url, "its message stays there"
    b.clock.advance(120)  # the one that waited in flight shows again, and starts too
    assert b.deliver_jobs_queue()[filler] is Outcome.STARTED
    assert len(b.executions_of("f")) == 1


def test_admission_empty_waiting_queue_of_an_unlimited_type_is_looked_in_once_per_poll_period() -> None:
    b = bench()
    deploy_without_the_limit(b)
    pass_ = extender_pass(b.receiver, handle=receive)
    receives = b.aws.calls["sqs.ReceiveMessage"]
    pass_(float("inf"))
    assert b.aws.calls["sqs.ReceiveMessage"] == receives + 1, "one look finds it empty"
    b.clock.advance(UNLIMITED_POLL_S - 1)
    pass_(float("inf"))
    assert b.aws.calls["sqs.ReceiveMessage"] == receives + 1, "no look before the poll period"
    b.clock.advance(2)
    pass_(float("inf"))
    assert b.aws.calls["sqs.ReceiveMessage"] == receives + 2
