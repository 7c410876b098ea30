"""`status`: queue depths, leases by status, and the last hour's renewals, lapses and lost leases.

Leases by status come from a Scan of the whole lease table (it reads every item: one read unit per
4 KB, eventually consistent). The last hour comes from CloudWatch on a deployed stack; the local
service has no CloudWatch data, so there it is derived from the table where it can be and marked not
available where it cannot.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from boto3.dynamodb.types import TypeDeserializer

from longjobs.cli.resources import DEFAULT_METRICS_SERVICE
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.lease.schema import WORKFLOW_CLOSED_AT_ATTR, attribute_time
from longjobs.engine.observability import TYPE_DIMENSION, MetricName

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

HOUR_S = 3_600
METRICS_NAMESPACE = "LongJobs"


def service_dimension(service: str) -> dict[str, str]:
    """The `service` dimension the processor's functions publish under (the stack's `MetricsService`)."""
    return {"Name": "service", "Value": service}


_deserializer = TypeDeserializer()
STATUS_ATTRIBUTES = ("status", "renewal_count", "renewed_at", "closed_at", WORKFLOW_CLOSED_AT_ATTR, "job_type")
"""What `status` reads of each item (a projection: the Scan still reads, and bills, whole items)."""


@dataclass(frozen=True)
class QueueDepth:
    visible: int
    in_flight: int
    delayed: int

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed


@dataclass(frozen=True)
class LastHour:
    """Counts of the last hour; None where the source cannot tell."""

    renewals: int | None
    lapses: int | None
    leases_lost: int | None


@dataclass(frozen=True)
class Status:
    at: float
    source: str  # where the last hour's counts come from: "cloudwatch" or "lease table"
    queue: QueueDepth
    dlq: QueueDepth
    leases: dict[str, int]
    oldest_message_age_s: float | None
    last_hour: LastHour
    notes: list[str] = field(default_factory=list)
    waiting: dict[str, int] = field(default_factory=dict)
    """Messages waiting in flight for a slot of their job type (WAITING leases), by type (admission)."""
    drain_s: dict[str, float] = field(default_factory=dict)
    """Each limited type's backlog drain time (`BacklogDrainTime`, the admission pass's latest estimate)."""


def queue_depth(sqs: SQSClient, queue_url: str) -> QueueDepth:
    attributes = sqs.get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return QueueDepth(
        visible=int(attributes.get("ApproximateNumberOfMessages", 0)),
        in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
        delayed=int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
    )


def scan_items(
    dynamodb: DynamoDBClient, table_name: str, attributes: list[str] | None = None
) -> Iterator[dict[str, Any]]:
    """Every item of the table as plain values, page by page (a paginated Scan; `attributes` projects)."""
    kwargs: dict[str, Any] = {"TableName": table_name}
    if attributes:
        names = {f"#a{i}": name for i, name in enumerate(attributes)}
        kwargs["ProjectionExpression"] = ", ".join(names)
        kwargs["ExpressionAttributeNames"] = names
    for page in dynamodb.get_paginator("scan").paginate(**kwargs):
        for item in page.get("Items", []):
            yield {key: _deserializer.deserialize(value) for key, value in item.items()}


def lease_counts(items: list[dict[str, Any]]) -> dict[str, int]:
    """Leases by status, every status present (zero when none)."""
    counts = Counter(str(item["status"]) for item in items if "status" in item)  # job locks have none
    result = {status.value: counts.pop(status.value, 0) for status in LeaseStatus}
    result.update(sorted(counts.items()))  # a status this build does not know (a newer writer)
    return result


def waiting_counts(items: list[dict[str, Any]]) -> dict[str, int]:
    """WAITING leases by job type: messages whose type was full, held hidden until about when a slot frees.
    (Work parked in a type's waiting queue is counted by SQS: the dashboard's admission graph.)"""
    counts = Counter(
        str(item.get("job_type") or "?") for item in items if item.get("status") == LeaseStatus.WAITING.value
    )
    return dict(sorted(counts.items()))


def last_hour_from_table(items: list[dict[str, Any]], now: float) -> LastHour:
    """What the table tells of the last hour: the renewals of leases renewed in it (their whole
    count, so an upper bound) and the leases closed LOST in it. Lapses leave no trace in the table."""
    since = now - HOUR_S
    renewals = sum(
        int(item.get("renewal_count", 0)) for item in items if float(item.get("renewed_at", 0) or 0) >= since
    )
    lost = sum(1 for item in items if item.get("status") == LeaseStatus.LOST.value and _closed_at(item) >= since)
    return LastHour(renewals=renewals, lapses=None, leases_lost=lost)


def _closed_at(item: dict[str, Any]) -> float:
    """When a lease closed (0 when not known): the processor's `closed_at` in epoch seconds, or the workflow's
    `workflow_closed_at`, an ISO 8601 string as Step Functions writes it."""
    for value in (item.get("closed_at"), item.get(WORKFLOW_CLOSED_AT_ATTR)):
        if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
            continue  # absent, or an item no version of the processor wrote: not a time
        moment = attribute_time({"S": value} if isinstance(value, str) and not _numeric(value) else {"N": str(value)})
        if moment is not None:
            return moment
    return 0.0


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _engine_query(query_id: str, metric_name: str, service: str) -> Any:
    return {
        "Id": query_id,
        "MetricStat": {
            "Metric": {
                "Namespace": METRICS_NAMESPACE,
                "MetricName": metric_name,
                "Dimensions": [service_dimension(service)],
            },
            "Period": 60,
            "Stat": "Sum",
        },
    }


def last_hour_from_cloudwatch(
    cloudwatch: CloudWatchClient, queue_name: str, now: float, service: str = DEFAULT_METRICS_SERVICE
) -> tuple[LastHour, float | None]:
    """The engine's metrics summed over the last hour, and the queue's latest oldest-message age. Lapses
    count as the `Lapses` alarm counts them: the extender's, and the redeliveries the receiver met while
    the job ran."""
    end = datetime.fromtimestamp(now, UTC)
    queries: list[Any] = [
        _engine_query("renewals", MetricName.RENEWALS, service),
        _engine_query("lapses", MetricName.LAPSES, service),
        _engine_query("redelivered", MetricName.REDELIVERED_WHILE_RUNNING, service),  # a lapse the receiver saw
        _engine_query("lost", MetricName.LEASES_LOST, service),
        {
            "Id": "oldest",
            "MetricStat": {
                "Metric": {
                    "Namespace": "AWS/SQS",
                    "MetricName": "ApproximateAgeOfOldestMessage",
                    "Dimensions": [{"Name": "QueueName", "Value": queue_name}],
                },
                "Period": 60,
                "Stat": "Maximum",
            },
        },
    ]
    values: dict[str, list[tuple[datetime, float]]] = {q["Id"]: [] for q in queries}
    kwargs: dict[str, Any] = {
        "MetricDataQueries": queries,
        "StartTime": end - timedelta(seconds=HOUR_S),
        "EndTime": end,
        "ScanBy": "TimestampDescending",
    }
    while True:
        response = cloudwatch.get_metric_data(**kwargs)
        for result in response.get("MetricDataResults", []):
            values[result["Id"]].extend(zip(result.get("Timestamps", []), result.get("Values", []), strict=False))
        token = response.get("NextToken")
        if not token:
            break
        kwargs["NextToken"] = token

    def total(query_id: str) -> int:
        return round(sum(value for _, value in values[query_id]))

    oldest = max(values["oldest"], default=None, key=lambda point: point[0])
    return (
        LastHour(renewals=total("renewals"), lapses=total("lapses") + total("redelivered"), leases_lost=total("lost")),
        None if oldest is None else oldest[1],
    )


def drain_times_from_cloudwatch(
    cloudwatch: CloudWatchClient, now: float, service: str = DEFAULT_METRICS_SERVICE
) -> dict[str, float]:
    """Each limited type's latest `BacklogDrainTime` of the last 15 minutes: seconds until its waiting
    and parked messages can be expected to have started (the extender publishes it every run)."""
    listed = cloudwatch.list_metrics(
        Namespace=METRICS_NAMESPACE,
        MetricName=MetricName.BACKLOG_DRAIN_TIME,
        Dimensions=[{"Name": "service", "Value": service}],  # this processor's types, not another stack's
    )
    types = sorted(
        {d["Value"] for m in listed.get("Metrics", []) for d in m.get("Dimensions", []) if d["Name"] == TYPE_DIMENSION}
    )
    if not types:
        return {}
    end = datetime.fromtimestamp(now, UTC)
    queries: list[Any] = [
        {
            "Id": f"drain{index}",
            "MetricStat": {
                "Metric": {
                    "Namespace": METRICS_NAMESPACE,
                    "MetricName": MetricName.BACKLOG_DRAIN_TIME,
                    "Dimensions": [service_dimension(service), {"Name": TYPE_DIMENSION, "Value": job_type}],
                },
                "Period": 60,
                "Stat": "Maximum",
            },
        }
        for index, job_type in enumerate(types)
    ]
    response = cloudwatch.get_metric_data(
        MetricDataQueries=queries,
        StartTime=end - timedelta(minutes=15),
        EndTime=end,
        ScanBy="TimestampDescending",
    )
    latest: dict[str, float] = {}
    for result in response.get("MetricDataResults", []):
        values = result.get("Values", [])
        if values:  # newest first
            latest[types[int(result["Id"].removeprefix("drain"))]] = float(values[0])
    return latest


def collect_status(
    *,
    sqs: SQSClient,
    dynamodb: DynamoDBClient,
    cloudwatch: CloudWatchClient | None,
    queue_url: str,
    dlq_url: str,
    table_name: str,
    now: float | None = None,
    items: list[dict[str, Any]] | None = None,
    service: str | None = DEFAULT_METRICS_SERVICE,
) -> Status:
    """One status snapshot. `cloudwatch` None: the local service (counts from the table). `items`: the
    table's items already scanned (with at least `STATUS_ATTRIBUTES`), so a caller that needs more of
    them (`top`) scans the table once."""
    now = time.time() if now is None else now
    queue = queue_depth(sqs, queue_url)
    dlq = queue_depth(sqs, dlq_url)
    if items is None:
        items = list(scan_items(dynamodb, table_name, list(STATUS_ATTRIBUTES)))
    if cloudwatch is None:
        return Status(
            at=now,
            source="lease table",
            queue=queue,
            dlq=dlq,
            leases=lease_counts(items),
            oldest_message_age_s=None,
            last_hour=last_hour_from_table(items, now),
            waiting=waiting_counts(items),
            notes=[
                "offline: no CloudWatch data; lapses and the oldest message's age are not available",
                "offline: renewals are the whole counts of leases renewed in the last hour",
                "offline: the backlog drain time is a CloudWatch metric (BacklogDrainTime): not available",
            ],
        )
    notes = []
    if service is None:  # a stack of one's own without the output: the service of earlier releases
        service = DEFAULT_METRICS_SERVICE
        notes.append(
            f"the stack has no MetricsService output: its metrics are read under service={service}, which "
            "this release's processor does not publish under; declare the output (docs/install.md)"
        )
    last_hour, oldest = last_hour_from_cloudwatch(cloudwatch, queue_url.rstrip("/").rsplit("/", 1)[-1], now, service)
    return Status(
        at=now,
        source="cloudwatch",
        queue=queue,
        dlq=dlq,
        leases=lease_counts(items),
        oldest_message_age_s=oldest,
        last_hour=last_hour,
        waiting=waiting_counts(items),
        drain_s=drain_times_from_cloudwatch(cloudwatch, now, service),
        notes=notes,
    )
