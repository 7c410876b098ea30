"""Reconciliation on moto: leases whose execution ended or never started are settled; running ones are not."""

from __future__ import annotations

import json
import time

import pytest

from longjobs.engine.extender.reconcile import reconcile
from longjobs.engine.lease import LastError, Lease, LeaseStatus
from longjobs.engine.settings import Settings
from longjobs.sim.clock import FakeClock
from tests.functional.conftest import Harness

SETTINGS = Settings(
    policy="threshold", visibility_timeout_s=30, threshold_s=5, extender_period_s=1, reconcile_grace_s=120
)
DEFINITION = json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}})


def state_machine(harness: Harness) -> str:
    return str(
        harness.stepfunctions.create_state_machine(
            name="jobs", definition=DEFINITION, roleArn="arn:aws:iam::123456789012:role/sfn"
        )["stateMachineArn"]
    )


def execution_arn(name: str) -> str:
    return f"arn:aws:states:us-east-1:123456789012:execution:jobs:{name}"


def leased(harness: Harness, name: str, *, clock: FakeClock | None = None, delay: int = 0) -> Lease:
    harness.send(json.dumps({"job": name}))
    [lease] = harness.receive_and_lease(SETTINGS, clock, execution_arn=execution_arn(name), release_delay_s=delay)
    return lease


def status_of(harness: Harness, lease: Lease) -> LeaseStatus:
    stored = harness.store(SETTINGS).get(lease.message_id)
    assert stored is not None
    return stored.status


def test_reconcile_settles_ended_and_never_started_executions(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    arn = state_machine(harness)
    running, aborted, failed, succeeded, missing = (
        leased(harness, n) for n in ("running", "aborted", "failed", "succeeded", "missing")
    )
    harness.stepfunctions.start_execution(stateMachineArn=arn, name="running")
    harness.stepfunctions.start_execution(stateMachineArn=arn, name="aborted")
    harness.stepfunctions.stop_execution(executionArn=execution_arn("aborted"))
    monkeypatch.setenv("SF_EXECUTION_HISTORY_TYPE", "FAILURE")  # moto starts this one FAILED
    harness.stepfunctions.start_execution(stateMachineArn=arn, name="failed")
    monkeypatch.delenv("SF_EXECUTION_HISTORY_TYPE")
    harness.stepfunctions.start_execution(stateMachineArn=arn, name="succeeded")
    _moto_execution("succeeded").status = "SUCCEEDED"  # moto cannot finish one by itself without execution on
    clock = FakeClock(time.time() + 200)  # all past the 120 s grace
    young = leased(harness, "young", clock=FakeClock(clock.now() - 10))

    report = reconcile(harness.extender(SETTINGS, clock), deadline=clock.now() + 30)

    assert status_of(harness, running) is LeaseStatus.ACTIVE
    assert status_of(harness, young) is LeaseStatus.ACTIVE  # inside the grace period: receiver may be mid-way
    for lease in (aborted, failed, missing):
        assert status_of(harness, lease) is LeaseStatus.RELEASED
    assert status_of(harness, succeeded) is LeaseStatus.SUCCEEDED
    assert (report.checked, report.running, report.released, report.completed) == (5, 1, 3, 1)
    visible = harness.visible_messages()
    assert sorted(visible) == sorted(lease.message_id for lease in (aborted, failed, missing))
    stored = harness.store(SETTINGS).get(missing.message_id)
    assert stored is not None and stored.last_error == LastError("execution never started")


def test_reconcile_release_uses_the_lease_release_delay(harness: Harness) -> None:
    state_machine(harness)
    lease = leased(harness, "gone", delay=600)
    clock = FakeClock(time.time() + 200)

    report = reconcile(harness.extender(SETTINGS, clock), deadline=clock.now() + 30)

    stored = harness.store(SETTINGS).get(lease.message_id)
    assert report.released == 1 and stored is not None and stored.status is LeaseStatus.RELEASED
    assert stored.visible_until == pytest.approx(clock.now() + 600, abs=1)
    assert harness.visible_messages() == []  # hidden for the release delay


def test_reconcile_settlement_that_loses_its_race_counts_nothing(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer closes the lease between reconciliation's fresh read and its settlement (the
    workflow's own close, landing late): the settlement's close is refused, and the run counts it neither
    settled nor failed."""
    state_machine(harness)
    lease = leased(harness, "gone")
    clock = FakeClock(time.time() + 200)
    extender = harness.extender(SETTINGS, clock)
    monkeypatch.setattr(extender.store, "close", lambda *args, **kwargs: None)

    report = reconcile(extender, deadline=clock.now() + 30)

    assert (report.checked, report.released, report.completed, report.failed) == (1, 0, 0, 0)
    assert status_of(harness, lease) is LeaseStatus.ACTIVE


def test_reconcile_is_rate_limited_and_capped_per_run(harness: Harness) -> None:
    state_machine(harness)
    leases = [leased(harness, f"gone-{i}") for i in range(6)]
    settings = SETTINGS.model_copy(update={"reconcile_rate_per_s": 2.0, "reconcile_max_per_run": 4})
    clock = FakeClock(time.time() + 200)
    start = clock.now()

    report = reconcile(harness.extender(settings, clock), deadline=clock.now() + 30)

    assert report.checked == 4 and report.released == 4
    assert clock.now() - start >= 1.5  # four calls at two per second
    assert sum(status_of(harness, lease) is LeaseStatus.ACTIVE for lease in leases) == 2


def test_reconcile_looks_at_a_lease_again_only_after_its_interval(harness: Harness) -> None:
    """A running job's lease is asked about once per `reconcile_interval_s`, not on every run: the watcher
    settles an ended execution from its status event, and reconciliation is the backstop for a lost one."""
    arn = state_machine(harness)
    running = leased(harness, "running")
    harness.stepfunctions.start_execution(stateMachineArn=arn, name="running")
    clock = FakeClock(time.time() + 200)
    extender = harness.extender(SETTINGS, clock)

    assert reconcile(extender, deadline=clock.now() + 30).checked == 1
    clock.advance(SETTINGS.reconcile_interval_s - 1)
    assert reconcile(extender, deadline=clock.now() + 30).checked == 0, "looked at within its interval"
    _moto_execution("running").status = "ABORTED"  # its status event was lost
    clock.advance(2)
    assert reconcile(extender, deadline=clock.now() + 30).checked == 0, "a whole sweep stops the next for a grace"
    clock.advance(SETTINGS.reconcile_grace_s - 2)
    report = reconcile(extender, deadline=clock.now() + 30)

    assert (report.checked, report.released) == (1, 1)
    assert status_of(harness, running) is LeaseStatus.RELEASED


def test_reconcile_sweeps_once_per_grace_unless_a_sweep_was_cut_short(harness: Harness) -> None:
    """A sweep that saw every lease that may be due stops the next one for `reconcile_grace_s` (a lease
    received after it is not due before then): no query of the index meanwhile. One cut short by the
    per-run cap goes on at the next run."""
    state_machine(harness)
    for name in ("a", "b", "c"):
        leased(harness, name)
    clock = FakeClock(time.time() + 200)
    capped = harness.extender(SETTINGS.model_copy(update={"reconcile_max_per_run": 2}), clock)
    queries: list[str] = []
    harness.dynamodb.meta.events.register("before-call.dynamodb.Query", lambda **_: queries.append("query"))

    assert reconcile(capped, deadline=clock.now() + 30).checked == 2
    clock.advance(1)
    assert reconcile(capped, deadline=clock.now() + 30).checked == 1, "cut short by the cap: on at the next run"
    swept = len(queries)
    clock.advance(1)
    assert reconcile(capped, deadline=clock.now() + 30).checked == 0
    assert len(queries) == swept, "the whole sweep stopped the next one: no query"
    clock.advance(SETTINGS.reconcile_grace_s)
    reconcile(capped, deadline=clock.now() + 30)
    assert len(queries) > swept, "a grace later it sweeps again"


def test_reconcile_lost_handle_closes_the_lease_lost(harness: Harness) -> None:
    state_machine(harness)
    lease = leased(harness, "deleted-elsewhere")
    harness.sqs.delete_message(QueueUrl=harness.queue_url, ReceiptHandle=lease.receipt_handle)
    clock = FakeClock(time.time() + 200)

    reconcile(harness.extender(SETTINGS, clock), deadline=clock.now() + 30)

    assert status_of(harness, lease) is LeaseStatus.LOST


def _moto_execution(name: str) -> object:
    from moto.stepfunctions.models import stepfunctions_backends

    machine = stepfunctions_backends["123456789012"]["us-east-1"].state_machines[0]
    return next(e for e in machine.executions if e.name == name)


def test_reconcile_due_reads_every_lease_due_least_recently_checked_first_however_leases_fall_into_shards(
    harness: Harness,
) -> None:
    leases = [leased(harness, f"spread-{i}") for i in range(8)]
    store = harness.store(SETTINGS.model_copy(update={"shards": 8}))  # 8 leases almost never fall one per shard
    now = time.time() + 60
    assert {lease.message_id for lease in store.index.reconcile_due(checked_before=now)} == {
        lease.message_id for lease in leases
    }

    oldest = min(leases, key=lambda lease: lease.checked_at or lease.received_at)
    store.mark_checked(oldest, now)
    due = store.index.reconcile_due(checked_before=now - 1)
    assert len(due) == 7 and oldest.message_id not in {lease.message_id for lease in due}
    assert [lease.message_id for lease in store.index.reconcile_due(checked_before=now)][-1] == oldest.message_id


def test_reconcile_describes_only_the_leases_the_list_of_running_executions_does_not_show(harness: Harness) -> None:
    """With the state machine's ARN, one ListExecutions (moto's) vouches for the running execution's lease:
    no DescribeExecution and no write for it; the aborted one and the never-started one are described
    and settled as before."""
    arn = state_machine(harness)
    settings = SETTINGS.model_copy(update={"state_machine_arn": arn})
    running, aborted, missing = (leased(harness, n) for n in ("running", "aborted", "missing"))
    harness.stepfunctions.start_execution(stateMachineArn=arn, name="running")
    harness.stepfunctions.start_execution(stateMachineArn=arn, name="aborted")
    harness.stepfunctions.stop_execution(executionArn=execution_arn("aborted"))
    clock = FakeClock(time.time() + 200)
    calls: list[str] = []
    for operation in ("ListExecutions", "DescribeExecution"):
        harness.stepfunctions.meta.events.register(
            f"before-call.states.{operation}", lambda operation=operation, **_: calls.append(operation)
        )
    harness.dynamodb.meta.events.register("before-call.dynamodb.UpdateItem", lambda **_: calls.append("UpdateItem"))

    report = reconcile(harness.extender(settings, clock), deadline=clock.now() + 30)

    assert (report.listed, report.checked, report.released) == (1, 2, 2)
    assert calls.count("ListExecutions") == 1 and calls.count("DescribeExecution") == 2
    assert status_of(harness, running) is LeaseStatus.ACTIVE
    assert status_of(harness, aborted) is LeaseStatus.RELEASED and status_of(harness, missing) is LeaseStatus.RELEASED
    stored = harness.store(settings).get(running.message_id)
    assert stored is not None and stored.checked_at is None, "the running lease was not written"
