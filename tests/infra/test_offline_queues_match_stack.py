"""The offline runtime's queues (`longjobs.offline.resources.create_resources`) are the stack's queues
(`longjobs.construct.queues.JobQueues`): the same retention, the same redrive backstop to the DLQ, the
same FIFO attributes (issue 22: "the offline runtime builds the same queues as the stack").

Known difference, not hidden here: the stack gives each limited job type a waiting queue; the offline
runtime makes none (its docstring says why). `test_offline_runtime_has_no_waiting_queues_yet` pins that
down so the day it changes, this module is where the comparison grows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from longjobs.construct.config import load_config
from longjobs.engine import aws
from longjobs.offline.resources import Resources, create_resources
from tests.infra.conftest import Synth
from tests.infra.test_fifo import FIFO_PROPERTIES


@pytest.fixture
def clients() -> Iterator[tuple[Any, Any, Any]]:
    with mock_aws():
        yield aws.sqs(), aws.dynamodb(), aws.stepfunctions()


def _offline(clients: tuple[Any, Any, Any], context: dict[str, str]) -> Resources:
    """The offline resources for the engine settings the stack derives from `context`."""
    return create_resources(*clients, load_config(context).engine, spark_heartbeat_s=3)


def _attributes(sqs: Any, url: str) -> dict[str, str]:
    return dict(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"])


def test_offline_jobs_queue_and_dlq_keep_and_redrive_as_the_stack(clients: tuple[Any, Any, Any], dev: Synth) -> None:
    sqs = clients[0]
    resources = _offline(clients, {})
    queues = dev.part("Queues")
    stack_queue = dev.resource(queues.queue)["Properties"]
    stack_dlq = dev.resource(queues.dlq)["Properties"]
    queue, dlq = _attributes(sqs, resources.queue_url), _attributes(sqs, resources.dlq_url)
    assert int(queue["MessageRetentionPeriod"]) == stack_queue["MessageRetentionPeriod"] == 14 * 86_400
    assert int(dlq["MessageRetentionPeriod"]) == stack_dlq["MessageRetentionPeriod"] == 14 * 86_400
    redrive = json.loads(queue["RedrivePolicy"])
    assert int(redrive["maxReceiveCount"]) == stack_queue["RedrivePolicy"]["maxReceiveCount"]
    assert redrive["deadLetterTargetArn"] == dlq["QueueArn"]


def test_offline_fifo_queues_have_the_stack_fifo_attributes(clients: tuple[Any, Any, Any]) -> None:
    sqs = clients[0]
    resources = _offline(clients, {"fifo": "true"})
    # the stack's FIFO properties as CloudFormation writes them (held to the synthesized FIFO stack there)
    expected = {key: str(value).lower() if isinstance(value, bool) else value for key, value in FIFO_PROPERTIES.items()}
    for url in (resources.queue_url, resources.dlq_url):
        assert url.endswith(".fifo"), "CloudFormation names a FIFO queue with the .fifo suffix, as offline"
        attributes = _attributes(sqs, url)
        assert {key: attributes.get(key) for key in expected} == expected


def test_offline_runtime_has_no_waiting_queues_yet(clients: tuple[Any, Any, Any], dev: Synth) -> None:
    """The stack's waiting queues (here the pyspark types, limited by their Glue jobs' concurrent runs) have
    no offline counterpart: parking is off offline (`WAITING_QUEUES` unset), so a full type waits in flight."""
    sqs = clients[0]
    resources = _offline(clients, {})
    assert sorted(dev.part("Queues").waiting) == ["spark", "wordcount"]
    names = sorted(url.rsplit("/", 1)[-1] for url in sqs.list_queues()["QueueUrls"])
    assert names == ["jobs", "jobs-dlq", "spark-tokens"]
    assert resources.settings.waiting_queues is None or not resources.settings.waiting_queues
