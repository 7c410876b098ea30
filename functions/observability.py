"""Logger, metrics and tracer: one instance each, shared by every handler and service."""

from __future__ import annotations

import os
from typing import Protocol

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "long-jobs")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "LongJobs")

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)


class MetricsSink(Protocol):
    """What publishing needs of Powertools `Metrics` (a recorder in tests)."""

    def add_metric(self, name: str, unit: str, value: float) -> None: ...


class MetricName:
    """Metric names, shared with the dashboard and alarms."""

    RENEWALS = "Renewals"
    RENEWAL_FAILURES_THROTTLED = "RenewalFailuresThrottled"
    RENEWAL_FAILURES_OTHER = "RenewalFailuresOther"
    RENEWALS_GIVEN_UP = "RenewalsGivenUp"
    TIME_LEFT_AT_RENEWAL = "TimeLeftAtRenewal"
    LAPSES = "Lapses"
    LEASES_CAPPED = "LeasesCapped"
    LEASES_LOST = "LeasesLost"
    LEASES_RELEASED = "LeasesReleased"
    LEASES_COMPLETED = "LeasesCompleted"
    LEASE_CONFLICTS = "LeaseConflicts"
    RECONCILE_FAILURES = "ReconcileFailures"
    EXECUTIONS_STOPPED = "ExecutionsStopped"  # their lease could no longer be held (invariant 8)
    RENEWALS_NOT_RECORDED = "RenewalsNotRecorded"  # SQS accepted, the table write failed: due again
    RELEASES_REASSERTED = "ReleasesReasserted"  # a renewal raced a release; the release was applied again
    EXTENDER_PASS_FAILURES = "ExtenderPassFailures"
    # receiver: one per outcome of a record
    JOBS_STARTED = "JobsStarted"
    JOBS_REJECTED = "JobsRejected"
    JOBS_INLINE = "JobsInline"
    JOBS_FANNED_OUT = "JobsFannedOut"
    JOBS_IGNORED = "JobsIgnored"
    JOBS_ALREADY_SUCCEEDED = "JobsAlreadySucceeded"
    REDELIVERED_WHILE_RUNNING = "RedeliveredWhileRunning"  # a lapse seen from the receiving end
    JOBS_SETTLED_ON_REDELIVERY = "JobsSettledOnRedelivery"
    JOBS_NOT_STARTED = "JobsNotStarted"
    RECORDS_STALE = "RecordsStale"
    JOBS_WAITING = "JobsWaiting"  # its job id was running: a delayed copy went back to the queue
    S3_OBJECTS_IGNORED = "S3ObjectsIgnored"  # created objects that are no trigger's completion marker
    RECORDS_FAILED = "RecordsFailed"
    # watcher
    EXECUTIONS_ENDED = "ExecutionsEnded"
