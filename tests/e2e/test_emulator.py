"""The emulator and the runtime's observer on it: moto's process-wide state is put back, and the observer
keeps following the lease table through moto's quirks."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from botocore.exceptions import ClientError
from moto.core.config import default_user_config

from longjobs.engine.delivery.dlq import ORIGINAL_MESSAGE_ID
from longjobs.engine.delivery.types import ADMISSION_ATTRIBUTE, Carried
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


def test_observer_follows_a_fanned_out_job_into_the_dlq_by_its_marker(emulated: tuple[Emulator, Resources]) -> None:
    """A fan-out's job message carries its marker (`s3:bucket/key@sequencer`) as its original, and the
    receiver's DLQ copy names that marker as `OriginalMessageId`: `serve`'s observer, which follows every
    message, finds the job in the DLQ by it, rather than report it lost."""
    emulator, resources = emulated
    observer = Observer(emulator, resources, follow_every_message=True)
    marker = "s3:raw-bucket/events/date=2026-11-21/_SUCCESS@0A1B2C3D4E5F"
    body = json.dumps({"job_id": "spark:raw-bucket/events/date=2026-11-21/", "type": "wait", "params": {"seconds": 1}})
    admission = {"DataType": "String", "StringValue": Carried(original_id=marker).encode()}
    received = {
        "MessageId": "fanned-out-1",
        "Body": body,
        "MessageAttributes": {ADMISSION_ATTRIBUTE: admission},
        "Attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1764000000000"},
    }
    observer.on_batch([received])
    reason = {"ErrorType": "AttemptsExhausted", ORIGINAL_MESSAGE_ID: marker}
    sqs = emulator.sqs()
    sqs.send_message(
        QueueUrl=resources.dlq_url,
        MessageBody=body,
        MessageAttributes={key: {"DataType": "String", "StringValue": value} for key, value in reason.items()},
    )

    observer.poll()

    track = observer.tracks["fanned-out-1"]  # a followed message is keyed by its id
    assert (track.final, track.dlq_attributes.get(ORIGINAL_MESSAGE_ID)) == ("dlq", marker)


def test_emulator_runs_executions_only_while_it_is_up() -> None:
    before = dict(default_user_config["stepfunctions"])
    emulator = Emulator()
    try:
        assert default_user_config["stepfunctions"] == {"execute_state_machine": True}
    finally:
        emulator.stop()

    assert default_user_config["stepfunctions"] == before, "mock_aws copies this: later tests must not inherit it"


def test_emulator_starts_on_a_port_whose_last_server_left_connections_in_time_wait() -> None:
    """A service stopped a moment ago leaves its closed connections in TIME_WAIT on its port. The server binds
    over them, so `serve` started again on that port starts, and a port only counts as in use when it listens."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = int(server.getsockname()[1])
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server's side closes first: its end waits in TIME_WAIT
            client.recv(1)
    with socket.socket() as plain:
        if plain.connect_ex(("127.0.0.1", port)) == 0 or _binds_without_reuse(port):
            pytest.skip("this system left no TIME_WAIT on the port")

    emulator = Emulator(port)
    try:
        assert emulator.port == port
    finally:
        emulator.stop()


def _binds_without_reuse(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
