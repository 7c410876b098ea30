"""The FIFO stack (`-c fifo=true`): FIFO queue and DLQ in high-throughput mode, the mapping's batch bounded
by the receives a group's queued jobs may use, the functions told, and the combinations that cannot work
refused with their keys."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from longjobs.construct.config import ConfigError, load_config
from tests.infra.conftest import Synth, synthesize

FIFO_PROPERTIES = {
    "FifoQueue": True,
    "ContentBasedDeduplication": True,
    "DeduplicationScope": "messageGroup",
    "FifoThroughputLimit": "perMessageGroupId",
}


@pytest.fixture(scope="module")
def fifo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synth]:
    yield synthesize(tmp_path_factory.mktemp("fifo"), {"fifo": "true", "max_attempts": "8"})


def test_fifo_stack_makes_the_queue_and_its_dlq_fifo_in_high_throughput_mode(fifo: Synth, dev: Synth) -> None:
    queues = fifo.part("Queues")
    queue, dlq = fifo.resource(queues.queue)["Properties"], fifo.resource(queues.dlq)["Properties"]
    for properties in (queue, dlq):
        assert {key: properties.get(key) for key in FIFO_PROPERTIES} == FIFO_PROPERTIES
        assert properties["SqsManagedSseEnabled"] is True
        assert "QueueName" not in properties, "CloudFormation names a FIFO queue with the .fifo suffix"
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [fifo.logical_id(queues.dlq), "Arn"]},
        "maxReceiveCount": (engine := load_config({"fifo": "true", "max_attempts": "8"}).engine).redrive_max_receives(
            engine.queue_retention_s
        ),
    }, "the redrive from the queue's policy (the backstop above max_attempts), to the FIFO DLQ"
    standard = dev.resource(dev.part("Queues").queue)["Properties"]
    assert not set(FIFO_PROPERTIES) & set(standard), "the default stack stays standard"


def test_fifo_stack_mapping_takes_one_record_at_a_time_with_no_window(fifo: Synth) -> None:
    [mapping] = fifo.of_type("AWS::Lambda::EventSourceMapping").values()
    properties = mapping["Properties"]
    assert properties["EventSourceArn"] == {"Fn::GetAtt": [fifo.logical_id(fifo.part("Queues").queue), "Arn"]}
    assert properties["BatchSize"] == 1, "only groups' heads are received: no job behind a retried one spends receives"
    assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert "MaximumBatchingWindowInSeconds" not in properties


def test_fifo_stack_tells_the_functions(fifo: Synth) -> None:
    functions = fifo.part("Functions")
    for function in (functions.receiver, functions.extender, functions.watcher):
        assert fifo.resource(function)["Properties"]["Environment"]["Variables"]["FIFO"] == "True"


def test_fifo_config_batch_size_is_one_and_larger_explicit_sizes_are_refused() -> None:
    assert load_config({"fifo": "true"}).mapping_batch_size == 1
    assert load_config({"fifo": "true", "max_attempts": "30"}).mapping_batch_size == 1
    assert load_config({"fifo": "true", "receiver_batch_size": "1"}).mapping_batch_size == 1
    assert load_config({}).mapping_batch_size == 10, "a standard queue keeps receiver_batch_size"
    with pytest.raises(ConfigError, match=r"receiver_batch_size=2 with fifo=true: .*DLQ unrun"):
        load_config({"fifo": "true", "receiver_batch_size": "2"})


def test_fifo_config_refuses_s3_notifications() -> None:
    with pytest.raises(ConfigError, match=r"s3_notifications=true with fifo=true: S3 event notifications cannot"):
        load_config({"fifo": "true", "s3_notifications": "true"})
    assert load_config({"s3_notifications": "true"}).infra.s3_notifications is True
