"""The offline runtime's queues (`longjobs.offline.resources.create_resources`) are the stack's queues
(`longjobs.construct.queues.JobQueues`): the same retention, the same redrive backstop to the DLQ, the
same FIFO attributes (issue 22: "the offline runtime builds the same queues as the stack").

Each job type gets a waiting queue, offline as in the stack: the jobs queue's VT, retention and
redrive, no event source mapping, passed to the functions as `waiting_queues`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from moto import mock_aws

from longjobs.construct.config import load_config
from longjobs.engine import aws
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.settings import MESSAGE_MAX_BYTES, Settings
from longjobs.offline.resources import WAITING_QUEUE_PREFIX, Resources, create_resources
from tests.infra.conftest import Synth
from tests.infra.test_fifo import FIFO_PROPERTIES

LIMITED_CATALOG = JobCatalog(
    [
        *BUILTIN_TYPES,
        next(t for t in BUILTIN_TYPES if t.name == "wait").model_copy(update={"name": "limited", "max_concurrency": 1}),
    ]
)


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
    for offline, stack in ((queue, stack_queue), (dlq, stack_dlq)):  # what the receiver fits its copies to
        assert int(offline["MaximumMessageSize"]) == stack["MaximumMessageSize"] == MESSAGE_MAX_BYTES
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


def test_offline_waiting_queues_are_the_stacks(clients: tuple[Any, Any, Any], dev: Synth) -> None:
    """Given the stack's job types (the pyspark ones limited by their Glue jobs' concurrent runs), the
    offline runtime makes the same waiting queues: one per type, the jobs queue's VT, the same
    retention and redrive to the DLQ, no event source mapping (only the functions receive from them), and
    the functions are told them as the stack tells them (`waiting_queues`: JSON {type: url})."""
    sqs = clients[0]
    processor = dev.stack.processor
    resources = create_resources(
        *clients,
        processor.config.engine,
        spark_heartbeat_s=3,
        catalog=processor.catalog,
        queue_visibility_timeout_s=processor.config.infra.queue_visibility_timeout_s,
    )
    stack_waiting = dev.part("Queues").waiting
    assert sorted(stack_waiting) == sorted(resources.waiting_queue_urls) == sorted(t.name for t in processor.catalog)
    assert resources.settings.waiting_queue_urls == resources.waiting_queue_urls
    assert resources.settings.waiting_queues == json.dumps(dict(sorted(resources.waiting_queue_urls.items())))
    stack_queue = dev.resource(dev.part("Queues").queue)["Properties"]
    dlq_arn = _attributes(sqs, resources.dlq_url)["QueueArn"]
    for job_type, url in resources.waiting_queue_urls.items():
        assert url.endswith(f"/{WAITING_QUEUE_PREFIX}{job_type}")
        stack = dev.resource(stack_waiting[job_type])["Properties"]
        offline = _attributes(sqs, url)
        assert int(offline["VisibilityTimeout"]) == stack["VisibilityTimeout"] == stack_queue["VisibilityTimeout"]
        assert int(offline["MessageRetentionPeriod"]) == stack["MessageRetentionPeriod"] == 14 * 86_400
        assert int(offline["MaximumMessageSize"]) == stack["MaximumMessageSize"] == MESSAGE_MAX_BYTES
        redrive = json.loads(offline["RedrivePolicy"])
        assert int(redrive["maxReceiveCount"]) == stack["RedrivePolicy"]["maxReceiveCount"]
        assert redrive["maxReceiveCount"] == processor.config.engine.redrive_max_receives(14 * 86_400)
        assert redrive["deadLetterTargetArn"] == dlq_arn
        assert "FifoQueue" not in offline
    # no event source mapping in the stack either: the functions alone receive from a waiting queue
    mapped = {str(m["Properties"]["EventSourceArn"]) for m in dev.of_type("AWS::Lambda::EventSourceMapping").values()}
    assert any(dev.logical_id(dev.part("Queues").queue) in arn for arn in mapped), "the jobs queue's mapping"
    assert not any(dev.logical_id(queue) in arn for queue in stack_waiting.values() for arn in mapped)


def test_offline_waiting_queues_keep_a_shorter_retention_as_the_stack(clients: tuple[Any, Any, Any]) -> None:
    """`queue_retention_s` is the waiting queues' retention too, and their redrive counts with it."""
    sqs = clients[0]
    engine = load_config({"queue_retention_s": "172800"}).engine
    resources = create_resources(*clients, engine, spark_heartbeat_s=3, catalog=LIMITED_CATALOG)
    assert resources.waiting_queue_urls, "a queue per type"
    for url in resources.waiting_queue_urls.values():
        attributes = _attributes(sqs, url)
        assert int(attributes["MessageRetentionPeriod"]) == 172_800
        assert int(json.loads(attributes["RedrivePolicy"])["maxReceiveCount"]) == engine.redrive_max_receives(172_800)


def _waiting_queue_names(sqs: Any) -> list[str]:
    names = (url.rsplit("/", 1)[-1] for url in sqs.list_queues()["QueueUrls"])
    return sorted(name for name in names if name.startswith(WAITING_QUEUE_PREFIX))


def test_offline_runtime_makes_a_waiting_queue_for_unlimited_types_too(clients: tuple[Any, Any, Any]) -> None:
    """Offline as in the stack, every type has a waiting queue, the built-in types too, which declare no
    limit (offline only a declared limit applies: there is no Glue)."""
    resources = _offline(clients, {})
    names = sorted(t.name for t in BUILTIN_TYPES)
    assert sorted(resources.waiting_queue_urls) == names and resources.settings.waiting_queue_urls
    assert _waiting_queue_names(clients[0]) == [WAITING_QUEUE_PREFIX + name for name in names]


def test_offline_fifo_queues_have_no_waiting_queues_as_the_stack(clients: tuple[Any, Any, Any]) -> None:
    """A FIFO processor has no admission: no waiting queue (`JobQueues` makes none either)."""
    engine = load_config({"fifo": "true"}).engine
    resources = create_resources(*clients, engine, spark_heartbeat_s=3, catalog=LIMITED_CATALOG)
    assert resources.waiting_queue_urls == {} and not resources.settings.waiting_queues
    assert _waiting_queue_names(clients[0]) == []


def test_offline_settings_that_name_their_own_waiting_queues_keep_them(clients: tuple[Any, Any, Any]) -> None:
    own = {"limited": "https://sqs.us-east-1.amazonaws.com/123456789012/my-waiting"}
    named = Settings.load({"waiting_queues": json.dumps(own)})
    resources = create_resources(*clients, named, spark_heartbeat_s=3, catalog=LIMITED_CATALOG)
    assert resources.waiting_queue_urls == {} and resources.settings.waiting_queue_urls == own
    assert _waiting_queue_names(clients[0]) == []
