"""The upgrade path of `shards` (`longjobs.engine.lease.legacy`): leases written with 8 shards (the old
default) and renewed by an extender of 1, on the simulated AWS and a fake clock. A lease on a shard the
extender no longer queried would never be renewed: its message would show again while its job runs."""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from longjobs.engine.extender.invocation import InvocationReport, run_invocation
from longjobs.engine.extender.service import Extender, legacy_shards
from longjobs.engine.lease import Lease, LeaseStatus, LeaseStore, table_definition
from longjobs.engine.lease.legacy import LEGACY_WINDOW_S
from longjobs.engine.policies import build_policy
from longjobs.engine.settings import Settings
from longjobs.engine.visibility import VisibilityClient
from longjobs.sim.aws import FakeAws, FakeQueue
from longjobs.sim.clock import FakeClock

START = 1_700_000_000.0
TABLE = "leases"
STATE_MACHINE_ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs"
QUEUE_VT_S = 180
OLD_SHARDS = 8


@dataclass
class Upgrade:
    """A table written by the old code (8 shards) and the new code's extender (1 shard), run each minute."""

    clock: FakeClock
    aws: FakeAws
    queue: FakeQueue
    settings: Settings
    extender: Extender
    old: LeaseStore  # the old code's writes (a receiver of 8 shards)
    reports: list[InvocationReport] = field(default_factory=list)
    queries: list[int] = field(default_factory=list)  # Query requests of each run

    def receive_old(self, n: int) -> list[Lease]:
        """`n` messages received by the old code's receiver: each lease written on its shard of 8."""
        for i in range(n):
            self.aws.sqs.send_message(QueueUrl=self.queue.url, MessageBody=f'{{"n": {i}}}')
        got = self.aws.sqs.receive_message(
            QueueUrl=self.queue.url, MaxNumberOfMessages=n, VisibilityTimeout=QUEUE_VT_S, AttributeNames=["All"]
        )["Messages"]
        assert len(got) == n
        now = self.clock.now()
        leases = []
        for message in got:
            lease = Lease(
                message_id=message["MessageId"],
                queue_url=self.queue.url,
                receipt_handle=message["ReceiptHandle"],
                receive_count=1,
                received_at=now,
                visible_until=now + QUEUE_VT_S,
                renew_until=now + self.settings.renewal_s,
                renew_at=now + QUEUE_VT_S - 2 * self.settings.extender_period_s,
                execution_arn=f"{STATE_MACHINE_ARN}:{message['MessageId']}",
                job_type="wait",
            )
            assert self.old.create(lease)
            leases.append(lease)
        return leases

    def run(self) -> InvocationReport:
        """One scheduled run of the extender, then a minute passes; no message may have shown meanwhile."""
        before = self.aws.calls["dynamodb.Query"]
        report = run_invocation(self.extender, remaining_ms=lambda: 90_000)
        self.queries.append(self.aws.calls["dynamodb.Query"] - before)
        self.reports.append(report)
        assert report.renewal.lapses == 0 and report.failed_passes == 0
        self.clock.advance(self.settings.extender_period_s)
        self.queue.refresh()
        assert self.queue.visible_count == 0, "a message showed again while its job runs"
        return report

    def run_until(self, t: float) -> None:
        while self.clock.now() < t:
            self.run()

    def lease(self, message_id: str) -> Lease:
        lease = self.extender.store.get(message_id)
        assert lease is not None
        return lease

    @property
    def legacy_live(self) -> list[int]:
        legacy = self.extender.store.legacy
        assert legacy is not None
        return legacy.live


def upgrade(**values: Any) -> Upgrade:
    clock = FakeClock(START)
    aws = FakeAws(clock, random.Random(7), table=table_definition(TABLE), state_machine_arn=STATE_MACHINE_ARN)
    queue = aws.sqs.create_queue("jobs", visibility_timeout_s=QUEUE_VT_S)
    settings = Settings.load({"table_name": TABLE, "queue_url": queue.url, **values})
    extender = Extender(
        settings=settings,
        policy=build_policy(settings),
        store=LeaseStore(
            aws.dynamodb,
            TABLE,
            shards=settings.shards,
            closed_ttl_s=settings.closed_ttl_s,
            legacy=legacy_shards(settings, clock),
        ),
        visibility=VisibilityClient(aws.sqs, clock=clock),  # type: ignore[arg-type]
        sqs=aws.sqs,  # type: ignore[arg-type]
        clock=clock,
    )
    old = LeaseStore(aws.dynamodb, TABLE, shards=OLD_SHARDS, closed_ttl_s=settings.closed_ttl_s)
    return Upgrade(clock, aws, queue, settings, extender, old)


def test_legacy_the_default_is_one_shard_watching_the_old_defaults_eight() -> None:
    settings = Settings()
    assert settings.shards == 1
    assert settings.legacy_shards == range(1, OLD_SHARDS)
    assert Settings(shards=8).legacy_shards == range(0), "no legacy shard when the count is not lowered"
    assert Settings(shards=4, previous_shards=16).legacy_shards == range(4, 16)


def test_legacy_leases_written_with_eight_shards_are_renewed_in_time_by_a_one_shard_extender() -> None:
    u = upgrade(shards=1)
    leases = u.receive_old(24)
    assert {u.old.shard_of(lease.message_id) for lease in leases} - {0}, "leases on the legacy shards"

    u.run_until(START + 3 * 3_600)  # (every run checks that no message showed)

    for lease in leases:
        renewed = u.lease(lease.message_id)
        assert renewed.status is LeaseStatus.ACTIVE and renewed.renewal_count >= 10, renewed
    assert sum(report.renewal.lapses for report in u.reports) == 0
    assert u.legacy_live == sorted({u.old.shard_of(lease.message_id) for lease in leases} - {0}), (
        "a legacy shard holding a lease stays in the every-run set"
    )


def test_legacy_lease_written_by_an_old_receiver_within_the_window_is_renewed() -> None:
    """The extender's container started on an empty table; an invocation of the old receiver still
    running (the update is under way) writes a lease on a legacy shard some minutes later."""
    u = upgrade(shards=1)
    u.run_until(START + 8 * 60)
    [lease] = u.receive_old(1)
    while u.old.shard_of(lease.message_id) == 0:  # on a legacy shard
        [lease] = u.receive_old(1)

    u.run_until(START + 2 * 3_600)

    renewed = u.lease(lease.message_id)
    assert renewed.renewal_count >= 10 and renewed.status is LeaseStatus.ACTIVE
    assert u.legacy_live == [u.old.shard_of(lease.message_id)]


def test_legacy_after_the_legacy_shards_are_found_empty_a_run_makes_one_due_query(
    caplog: pytest.LogCaptureFixture,
) -> None:
    u = upgrade()  # the defaults: 1 shard, the old default's 8 watched
    leases = u.receive_old(6)
    with caplog.at_level(logging.INFO):
        u.run_until(START + 10 * 60)
        for lease in leases:  # the jobs end: their messages are deleted, their leases closed (out of the indexes)
            u.aws.sqs.delete_message(QueueUrl=u.queue.url, ReceiptHandle=lease.receipt_handle)
            assert u.extender.store.close(u.lease(lease.message_id), LeaseStatus.SUCCEEDED, now=u.clock.now())
        u.run_until(START + LEGACY_WINDOW_S + 60)  # past the window: the legacy shards are found empty
        assert u.legacy_live == []
        assert any("legacy shards empty" in record.getMessage() for record in caplog.records)

        window_runs = len(u.queries)
        u.run_until(START + 2 * LEGACY_WINDOW_S - 120)

    assert u.queries[window_runs:] == [1] * (len(u.queries) - window_runs), "one due query a run"
    assert u.queries[0] == 1 + (OLD_SHARDS - 1), "in the window every legacy shard is queried each run"


def test_legacy_shard_written_after_it_was_found_empty_is_found_again_by_the_periodic_check() -> None:
    """A writer of the old count outside the design (a function updated by hand, out of order) writes a
    lease on a legacy shard after the window: the periodic check finds it, renews it, watches the shard."""
    u = upgrade(shards=1)
    u.run_until(START + LEGACY_WINDOW_S + 120)  # (the run at the window's end is the first check)
    assert u.legacy_live == [] and u.queries[-1] == 1
    first_check = START + LEGACY_WINDOW_S  # the container's first run was at START
    next_check = first_check + LEGACY_WINDOW_S
    u.run_until(next_check - u.settings.extender_period_s)
    [lease] = u.receive_old(1)
    while u.old.shard_of(lease.message_id) == 0:
        [lease] = u.receive_old(1)
    shard = u.old.shard_of(lease.message_id)

    u.run()  # not a check yet: the shard is not queried
    assert u.queries[-1] == 1 and u.lease(lease.message_id).renewal_count == 0
    u.run()  # the check: every legacy shard queried once, the lease found due and renewed
    assert u.queries[-1] >= OLD_SHARDS and u.legacy_live == [shard]
    assert u.lease(lease.message_id).renewal_count == 1
    u.run_until(u.clock.now() + 2 * 3_600)  # watched every run from then on
    assert u.lease(lease.message_id).renewal_count >= 10


def test_legacy_shards_watched_every_run_are_reconciled_too() -> None:
    """The `reconcile` index holds the same leases under the same shards: reconciliation reads the legacy
    shards the extender watches every run (every one, until the first is found empty)."""
    u = upgrade(shards=1)
    leases = u.receive_old(16)
    on_legacy = {lease.message_id for lease in leases if u.old.shard_of(lease.message_id) != 0}
    store = u.extender.store
    candidates = {lease.message_id for lease in store.index.reconcile_due(checked_before=u.clock.now() + 1)}
    assert on_legacy and on_legacy <= candidates


def test_legacy_shards_lowered_during_a_seed_are_watched_until_empty(monkeypatch: pytest.MonkeyPatch) -> None:
    """The `lower` layout (4 shards to 2 while jobs run, `previous_shards` 4): seed 2 holds every property;
    the same deploy without `previous_shards` (no legacy watch) lets a lease on shard 2 or 3 lapse."""
    from longjobs.sim import campaign
    from longjobs.sim.workload import draw

    workload = draw(2)
    assert (workload.shards_before, workload.settings["shards"]) == (4, 2) and workload.upgrade_at_s is not None
    assert campaign.run_seed(2, keep_calls=False).violation is None

    def forgetful(seed: int, profile: str = "mixed", **kinds: bool) -> Any:
        drawn = draw(seed, profile, **kinds)
        drawn.settings["previous_shards"] = drawn.settings["shards"]
        return drawn

    monkeypatch.setattr(campaign, "draw", forgetful)
    violation = campaign.run_seed(2, keep_calls=False).violation
    assert violation is not None and violation.property == "no_lapse"
