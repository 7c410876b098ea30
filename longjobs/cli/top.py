"""`top`: a live, read-only view of the processor: what `status` reads, per job type and as rates.

One frame is `status`'s readings (queue and DLQ depth, leases by status, the oldest message's age, the
last hour, each limited type's `BacklogDrainTime`) and, from the same one Scan of the lease table:

- per job type: executions running (ACTIVE leases) and what their attempts have cost so far (each from
  its receive to now, priced by `longjobs.engine.cost` when the job types are known), the admission
  slots held against the type's limit (the limit comes from the job types the stack or service
  publishes, or `--jobs-file`; without them, the slots the table has seen are shown), messages waiting
  for a slot in flight (WAITING leases) and parked in the type's waiting queue (PARKED markers no copy
  has claimed yet);
- the renewal rate: renewals a minute between this frame and the previous one (the sum of every lease's
  renewal count, which only grows while a lease lives); on the first frame, the last hour's renewals
  over 60 (CloudWatch on a stack; the table's upper bound offline).

Nothing here receives a message: every reading is `GetQueueAttributes`, a Scan, or CloudWatch.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from longjobs.cli.resources import DEFAULT_METRICS_SERVICE
from longjobs.cli.status import STATUS_ATTRIBUTES, Status, collect_status, scan_items
from longjobs.engine.admission.slots import slot_type
from longjobs.engine.cost import attempt_usage
from longjobs.engine.jobs import JobCatalog
from longjobs.engine.lease import LeaseStatus
from longjobs.engine.lease.lock import HELD, LOCK_STATE_ATTR
from longjobs.engine.lease.schema import PARTITION_KEY

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient

TOP_ATTRIBUTES = (*STATUS_ATTRIBUTES, PARTITION_KEY, "received_at", "claimed_by", LOCK_STATE_ATTR)


@dataclass(frozen=True)
class TypeLine:
    """One job type's line of the view."""

    job_type: str
    running: int  # ACTIVE leases of the type
    slots_held: int  # its admission slots held now
    slots_seen: int  # its admission slot items in the table (a lower bound of the limit)
    limit: int | None  # its max_concurrency, when the job types are known
    waiting: int  # WAITING leases: waiting in flight for a slot
    parked: int  # PARKED markers not yet claimed by a copy: waiting in the type's waiting queue
    drain_s: float | None  # its latest BacklogDrainTime (CloudWatch), None where not available
    running_usd: float | None = None  # what its running attempts cost so far; None without the job types


@dataclass(frozen=True)
class Frame:
    """One frame of `top`."""

    status: Status
    types: list[TypeLine]
    renewals_total: int  # every lease's renewal count, summed (the next frame's rate counts from it)
    renewals_per_min: float | None
    renewal_rate_source: str  # "between frames", "last hour's average" or "not available"
    oldest_open_lease_s: float | None  # age of the oldest open (ACTIVE or WAITING) lease's receive
    notes: list[str] = field(default_factory=list)


def type_lines(
    items: list[dict[str, Any]],
    limits: Mapping[str, int],
    drain_s: Mapping[str, float],
    job_types: JobCatalog | None = None,
    now: float | None = None,
) -> list[TypeLine]:
    """Each job type's line, from the table's items (leases and the slot items of the lock table part);
    with `job_types`, what each type's running attempts have cost by `now`."""
    now = time.time() if now is None else now
    running: Counter[str] = Counter()
    spent: dict[str, float] = {}
    waiting: Counter[str] = Counter()
    parked: Counter[str] = Counter()
    held: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for item in items:
        key = str(item.get(PARTITION_KEY, ""))
        slot_of = slot_type(key)
        if slot_of is not None:
            seen[slot_of] += 1
            held[slot_of] += item.get(LOCK_STATE_ATTR) == HELD
            continue
        job_type = str(item.get("job_type") or "?")
        status = item.get("status")
        if status == LeaseStatus.ACTIVE.value:
            running[job_type] += 1
            if job_types is not None and "received_at" in item:
                usage = attempt_usage(job_types.get(job_type), now - float(item["received_at"]))
                spent[job_type] = spent.get(job_type, 0.0) + usage.total_usd
        elif status == LeaseStatus.WAITING.value:
            waiting[job_type] += 1
        elif status == LeaseStatus.PARKED.value and not item.get("claimed_by"):
            parked[job_type] += 1
    names = sorted({*running, *waiting, *parked, *seen, *limits})
    return [
        TypeLine(
            job_type=name,
            running=running[name],
            slots_held=held[name],
            slots_seen=seen[name],
            limit=limits.get(name),
            waiting=waiting[name],
            parked=parked[name],
            drain_s=drain_s.get(name),
            running_usd=(spent.get(name, 0.0) if job_types is not None else None),
        )
        for name in names
    ]


def collect_frame(
    *,
    sqs: SQSClient,
    dynamodb: DynamoDBClient,
    cloudwatch: CloudWatchClient | None,
    queue_url: str,
    dlq_url: str,
    table_name: str,
    limits: Mapping[str, int] | None = None,
    job_types: JobCatalog | None = None,
    previous: Frame | None = None,
    now: float | None = None,
    service: str | None = DEFAULT_METRICS_SERVICE,
) -> Frame:
    """One frame: `status`'s readings and the lines above from one Scan (`previous`: the last frame, for
    the renewal rate between the two; `limits`: each limited type's limit, None when no catalog was given)."""
    now = time.time() if now is None else now
    items = list(scan_items(dynamodb, table_name, list(TOP_ATTRIBUTES)))
    status = collect_status(
        sqs=sqs,
        dynamodb=dynamodb,
        cloudwatch=cloudwatch,
        queue_url=queue_url,
        dlq_url=dlq_url,
        table_name=table_name,
        now=now,
        items=items,
        service=service,
    )
    total = sum(int(item.get("renewal_count", 0) or 0) for item in items)
    notes: list[str] = []
    if previous is not None and now > previous.status.at:
        rate: float | None = max(0, total - previous.renewals_total) * 60 / (now - previous.status.at)
        source = "between frames"
    elif status.last_hour.renewals is not None:
        rate, source = status.last_hour.renewals / 60, "last hour's average"
    else:
        rate, source = None, "not available"
    opened = [
        float(item["received_at"])
        for item in items
        if item.get("status") in (LeaseStatus.ACTIVE.value, LeaseStatus.WAITING.value) and "received_at" in item
    ]
    if limits is None:
        notes.append("limits unknown: the deployment publishes no job types (pass --jobs-file FILE)")
    return Frame(
        status=status,
        types=type_lines(items, limits or {}, status.drain_s, job_types, now),
        renewals_total=total,
        renewals_per_min=rate,
        renewal_rate_source=source,
        oldest_open_lease_s=now - min(opened) if opened else None,
        notes=notes,
    )
