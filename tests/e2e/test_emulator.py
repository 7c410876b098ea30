"""The emulator and the runtime's observer on it: moto's process-wide state is put back, and the observer
keeps following the lease table through moto's quirks."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError
from moto.core.config import default_user_config

from longjobs.engine.lease import LastError, Lease, LeaseStatus, LeaseStore
from longjobs.offline.emulator import Emulator, Resources, environment, function_environment
from longjobs.offline.observe import Observer
from longjobs.offline.scenario import parse_scenario
from tests.e2e.conftest import SPARK_HEARTBEAT_S
from tests.short_settings import SHORT_THRESHOLD

pytestmark = pytest.mark.e2e


@pytest.fixture
def emulated() -> Iterator[tuple[Emulator, Resources]]:
    emulator = Emulator()
    try:
        settings = parse_scenario({"settings": SHORT_THRESHOLD, "jobs": [{"id": "a", "raw_body": "x"}]}).settings
        resources = emulator.create(settings, spark_heartbeat_s=SPARK_HEARTBEAT_S)
        with environment(function_environment(resources, emulator)):
            yield emulator, resources
    finally:
        emulator.stop()


def test_observer_follows_leases_after_a_cancelled_transaction(emulated: tuple[Emulator, Resources]) -> None:
    emulator, resources = emulated
    observer = Observer(emulator, resources)
    track = observer.send("job", json.dumps({"job_id": "job", "type": "wait", "params": {"seconds": 1}}))
    store = LeaseStore(emulator.dynamodb(), resources.table_name, shards=1, closed_ttl_s=60)
    lease = Lease(track.message_id, resources.queue_url, "handle-1", 1, 100.0, 104.0, 200.0, renew_at=102.0)
    assert store.create(lease)
    observer.poll()
    assert observer.tracks["job"].lease == lease

    # A transaction whose condition fails: moto puts back a copy of the table, stream and all.
    with pytest.raises(ClientError, match="TransactionCanceled"):
        emulator.dynamodb().transact_write_items(
            TransactItems=[
                {
                    "ConditionCheck": {
                        "TableName": resources.table_name,
                        "Key": {"pk": {"S": track.message_id}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            ]
        )
    closed = store.close(lease, LeaseStatus.RELEASED, now=105.0, error=LastError("released after the rollback"))
    assert closed is not None

    observer.poll()

    seen = observer.tracks["job"].lease
    assert seen is not None and seen.status is LeaseStatus.RELEASED
    assert observer.tracks["job"].released == 1


def test_emulator_runs_executions_only_while_it_is_up() -> None:
    before = dict(default_user_config["stepfunctions"])
    emulator = Emulator()
    try:
        assert default_user_config["stepfunctions"] == {"execute_state_machine": True}
    finally:
        emulator.stop()

    assert default_user_config["stepfunctions"] == before, "mock_aws copies this: later tests must not inherit it"
