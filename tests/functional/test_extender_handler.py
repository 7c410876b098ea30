"""The extender Lambda handler end to end on moto: settings from the environment, EMF metrics out."""

from __future__ import annotations

import json
import time

import pytest

from longjobs.engine.lease import Lease, LeaseStatus
from longjobs.engine.settings import Settings, SettingsError
from longjobs.offline.lambdas import LambdaContext
from tests.functional.conftest import TABLE, Harness, emitted_metrics, load_handler


def test_extender_handler_renews_due_leases_and_publishes_metrics(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    handler = load_handler(
        monkeypatch, "longjobs.functions.extender", TABLE_NAME=TABLE, QUEUE_URL=harness.queue_url, SHARDS="8"
    )
    machine = harness.stepfunctions.create_state_machine(
        name="jobs",
        definition=json.dumps({"StartAt": "Done", "States": {"Done": {"Type": "Succeed"}}}),
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    execution = harness.stepfunctions.start_execution(stateMachineArn=machine, name="job-1")["executionArn"]
    harness.send()
    [received] = harness.receive_and_lease(Settings(), execution_arn=execution)
    store = harness.store(Settings())
    # make it due now, 500 s into the job, with 60 s of visibility left (the handler's import may take
    # seconds on a busy machine, and a renewal after the visibility ran out counts a lapse)
    now = time.time()
    due = Lease(**{**received.__dict__, "received_at": now - 500, "visible_until": now + 60, "renew_at": now - 1})
    harness.dynamodb.delete_item(TableName=TABLE, Key={"pk": {"S": received.message_id}})
    assert store.create(due)

    result = handler.handler({"source": "aws.scheduler"}, LambdaContext(deadline=now + 55))

    assert result["ticks"] == 1 and result["renewal"]["renewed"] == 1
    stored = store.get(due.message_id)
    assert stored is not None and stored.status is LeaseStatus.ACTIVE and stored.renewal_count == 1
    renewed_at = stored.renewed_at or 0
    # chunk = the job's age when renewed (500 s plus however long the cold start took), in whole seconds
    assert stored.visible_until - renewed_at == pytest.approx(renewed_at - due.received_at, abs=1)
    assert 500 <= stored.visible_until - renewed_at < 530
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics["Renewals"] == 1 and metrics["Lapses"] == 0 and metrics["LeasesLost"] == 0
    assert 0 < metrics["TimeLeftAtRenewal"] <= 60
    assert metrics["LeasesReleased"] == 0  # its execution is running: reconciliation leaves it


def test_extender_handler_refuses_a_bad_setting_at_start_up(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError, match="heartbeat_s"):
        load_handler(monkeypatch, "longjobs.functions.extender", HEARTBEAT_S="-1")


def test_extender_handler_requires_the_table_name(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TABLE_NAME", raising=False)
    handler = load_handler(monkeypatch, "longjobs.functions.extender")
    with pytest.raises(SettingsError, match="TABLE_NAME"):
        handler.handler({}, LambdaContext(deadline=time.time() + 55))


def test_extender_handler_reads_vt_from_the_queue_for_the_remaining_policy_only(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    harness.sqs.set_queue_attributes(QueueUrl=harness.queue_url, Attributes={"VisibilityTimeout": "45"})
    env = {"TABLE_NAME": TABLE, "QUEUE_URL": harness.queue_url, "EXTENDER_PERIOD_S": "1", "HEARTBEAT_S": "0.5"}
    remaining = load_handler(monkeypatch, "longjobs.functions.extender", POLICY="remaining", **env)
    assert remaining.extender().settings.visibility_timeout_s == 45, "seed 000 renews by the queue's VT"
    threshold = load_handler(monkeypatch, "longjobs.functions.extender", POLICY="threshold", **env)
    assert threshold.extender().settings.visibility_timeout_s is None
    assert threshold.extender().policy.initial_timeout_s() == 30, "seed 001's own 30 s, not the queue's 45"


def test_extender_handler_needs_the_queue_url_to_read_its_vt(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("QUEUE_URL", raising=False)
    handler = load_handler(
        monkeypatch, "longjobs.functions.extender", TABLE_NAME=TABLE, POLICY="remaining", EXTENDER_PERIOD_S="1"
    )
    with pytest.raises(SettingsError, match=r"queue_url \(QUEUE_URL\) is required"):
        handler.extender()
