"""What one attempt of a job cost: its runner's billed usage and the processor's own share, in dollars
at list price.

- **pyspark on glue**: DPU-hours. `DPUSeconds` when Glue reports it (Flex and auto-scaling runs), else
  the run's execution time times its DPUs, at least one minute. From the run's outcome on success, from
  the attempt's time otherwise.
- **pyspark on emr_serverless**: vCPU-, memory GB- and storage GB-hours, the run's
  `billedResourceUtilization` on success. Otherwise the attempt's time times a driver and one executor,
  at least one minute each.
- **wait, inline, state_machine**: nothing of the processor's to price (a state machine type's machine
  is the user's).

The processor's share is what the burst benchmark measures per job (`PROCESSOR_PER_ATTEMPT`: its state
transitions, SQS requests, DynamoDB units and Lambda invocations) and, for each hour a message is kept
hidden, what renewing it takes (`PROCESSOR_PER_HOUR`); docs/benchmarks.md has both.

A run the processor stopped (a cancel, a lost lease, a timeout) reports nothing, so its usage is its
attempt's time times its capacity: what Glue bills for a run of fixed workers. An estimate says so
(`reported` false). The prices are us-east-1 list prices without free tiers, each with the page that
publishes it; the benchmarks price with the same table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the watcher imports this at its cold start; the catalog is read on its first event
    from longjobs.engine.jobs.types import JobType

PRICES: dict[str, tuple[float, str]] = {
    "stepfunctions_transition": (0.025 / 1_000, "https://aws.amazon.com/step-functions/pricing/"),
    "sqs_request": (0.40 / 1_000_000, "https://aws.amazon.com/sqs/pricing/ (standard queue)"),
    "dynamodb_wru": (0.625 / 1_000_000, "https://aws.amazon.com/dynamodb/pricing/on-demand/"),
    "dynamodb_rru": (0.125 / 1_000_000, "https://aws.amazon.com/dynamodb/pricing/on-demand/"),
    "lambda_request": (0.20 / 1_000_000, "https://aws.amazon.com/lambda/pricing/"),
    "lambda_gb_s": (0.0000133334, "https://aws.amazon.com/lambda/pricing/ (arm64)"),
    "lambda_snapstart_cache_gb_s": (0.0000015046, "https://aws.amazon.com/lambda/pricing/ (SnapStart cache)"),
    "lambda_snapstart_restore_gb": (0.0001397998, "https://aws.amazon.com/lambda/pricing/ (SnapStart restore)"),
    "scheduler_invocation": (1.00 / 1_000_000, "https://aws.amazon.com/eventbridge/pricing/ (Scheduler)"),
    "glue_dpu_hour": (0.44, "https://aws.amazon.com/glue/pricing/ (Spark jobs)"),
    "emr_serverless_vcpu_hour": (0.052624, "https://aws.amazon.com/emr/pricing/ (EMR Serverless, x86)"),
    "emr_serverless_gb_hour": (0.0057785, "https://aws.amazon.com/emr/pricing/ (EMR Serverless, x86)"),
    "emr_serverless_storage_gb_hour": (0.000111, "https://aws.amazon.com/emr/pricing/ (EMR Serverless, storage)"),
    "kms_key_month": (1.00, "https://aws.amazon.com/kms/pricing/ (customer managed key)"),
    "cloudwatch_alarm_month": (0.10, "https://aws.amazon.com/cloudwatch/pricing/ (standard resolution)"),
    "cloudwatch_dashboard_month": (3.00, "https://aws.amazon.com/cloudwatch/pricing/"),
}
"""us-east-1 list prices (no free tier), each with the page that publishes it."""

GLUE_DPUS = {"G.1X": 1, "G.2X": 2, "G.4X": 4, "G.8X": 8}
"""DPUs per Glue worker (https://docs.aws.amazon.com/glue/latest/dg/worker-types.html)."""
GLUE_DEFAULT_WORKERS = (2, "G.1X")
"""The stack's `glue_workers` and `glue_worker_type` defaults, for a declaration that names neither."""
MINIMUM_BILLED_S = 60.0
"""Glue bills a run at least a minute (2.0 and later); EMR Serverless bills each worker at least a minute."""

PROCESSOR_PER_ATTEMPT = {
    "stepfunctions_transition": 13.0,
    "sqs_request": 2.3,
    "dynamodb_wru": 11.6,
    "dynamodb_rru": 1.3,
    "lambda_request": 1.1,
}
"""The processor's own use per job, measured by the burst benchmark (docs/benchmarks.md, burst)."""
PROCESSOR_PER_HOUR = {"sqs_request": 0.83, "dynamodb_wru": 9.61}
"""What renewing a running job's message takes per hour, measured by the extender benchmark."""


@dataclass(frozen=True)
class AttemptUsage:
    """What one attempt used: its runner's billed usage and the processor's share, priced by `PRICES`."""

    runner: str  # glue, emr_serverless, or none
    seconds: float  # the run time priced (the runner's, or the attempt's)
    reported: bool  # the runner reported its billed usage; else estimated from time and capacity
    dpu_hours: float = 0.0
    vcpu_hours: float = 0.0
    memory_gb_hours: float = 0.0
    storage_gb_hours: float = 0.0
    processor: tuple[tuple[str, float], ...] = ()  # (price name, quantity)

    @property
    def runner_usd(self) -> float:
        return (
            self.dpu_hours * PRICES["glue_dpu_hour"][0]
            + self.vcpu_hours * PRICES["emr_serverless_vcpu_hour"][0]
            + self.memory_gb_hours * PRICES["emr_serverless_gb_hour"][0]
            + self.storage_gb_hours * PRICES["emr_serverless_storage_gb_hour"][0]
        )

    @property
    def processor_usd(self) -> float:
        return sum(quantity * PRICES[name][0] for name, quantity in self.processor)

    @property
    def total_usd(self) -> float:
        return self.runner_usd + self.processor_usd

    def to_data(self) -> dict[str, Any]:
        data = asdict(self)
        data["processor"] = dict(self.processor)
        data.update(runner_usd=self.runner_usd, processor_usd=self.processor_usd, total_usd=self.total_usd)
        return data


def processor_share(hidden_s: float) -> tuple[tuple[str, float], ...]:
    """The processor's requests and transitions for one attempt whose message stayed hidden `hidden_s`."""
    hours = max(0.0, hidden_s) / 3_600
    names = sorted(set(PROCESSOR_PER_ATTEMPT) | set(PROCESSOR_PER_HOUR))
    return tuple(
        (name, PROCESSOR_PER_ATTEMPT.get(name, 0.0) + hours * PROCESSOR_PER_HOUR.get(name, 0.0)) for name in names
    )


def attempt_usage(job_type: JobType | None, seconds: float, outcome: Mapping[str, Any] | None = None) -> AttemptUsage:
    """The usage of one attempt of `job_type` that lasted `seconds` (its execution's start to its stop, or
    to now while it runs). `outcome` is what the run reported on success (the lease's result, or the
    execution's output): Glue's `execution_time_s` and `dpu_seconds`, EMR Serverless's job run."""
    seconds = max(0.0, seconds)
    share = processor_share(seconds)
    if job_type is None or job_type.runner != "pyspark":
        return AttemptUsage(runner="none", seconds=seconds, reported=False, processor=share)
    if job_type.platform == "emr_serverless":
        return _emr_usage(job_type, seconds, outcome, share)
    return _glue_usage(job_type, seconds, outcome, share)


def _glue_usage(
    job_type: JobType, seconds: float, outcome: Mapping[str, Any] | None, share: tuple[tuple[str, float], ...]
) -> AttemptUsage:
    glue = job_type.glue
    workers = glue.workers if glue is not None and glue.workers else GLUE_DEFAULT_WORKERS[0]
    worker_type = glue.worker_type if glue is not None and glue.worker_type else GLUE_DEFAULT_WORKERS[1]
    reported_dpu_s = _number(outcome, "dpu_seconds")
    if reported_dpu_s is not None:
        return AttemptUsage("glue", seconds, True, dpu_hours=reported_dpu_s / 3_600, processor=share)
    run_s = _number(outcome, "execution_time_s")
    billed_s = max(MINIMUM_BILLED_S, run_s if run_s is not None else seconds)
    dpu_hours = workers * GLUE_DPUS[worker_type] * billed_s / 3_600
    return AttemptUsage("glue", billed_s, run_s is not None, dpu_hours=dpu_hours, processor=share)


def _emr_usage(
    job_type: JobType, seconds: float, outcome: Mapping[str, Any] | None, share: tuple[tuple[str, float], ...]
) -> AttemptUsage:
    billed = _find(outcome, "billedresourceutilization")
    if isinstance(billed, Mapping):
        values = {str(key).lower(): value for key, value in billed.items()}
        return AttemptUsage(
            "emr_serverless",
            seconds,
            True,
            vcpu_hours=float(values.get("vcpuhour", 0.0)),
            memory_gb_hours=float(values.get("memorygbhour", 0.0)),
            storage_gb_hours=float(values.get("storagegbhour", 0.0)),
            processor=share,
        )
    settings = job_type.emr
    billed_s = max(MINIMUM_BILLED_S, seconds)
    workers = 2  # the driver and one executor: the least a Spark run holds
    return AttemptUsage(
        "emr_serverless",
        billed_s,
        False,
        vcpu_hours=workers * settings.executor_cores * billed_s / 3_600,
        memory_gb_hours=workers * settings.executor_memory_gb * billed_s / 3_600,
        processor=share,
    )


def _number(outcome: Mapping[str, Any] | None, key: str) -> float | None:
    value = outcome.get(key) if isinstance(outcome, Mapping) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _find(value: Any, key: str) -> Any:
    """The first value under `key` (compared in lower case) anywhere in `value`: the `.sync` output's
    casing and nesting are not documented, so the job run's billed usage is looked for by name."""
    if isinstance(value, Mapping):
        for name, item in value.items():
            if str(name).lower() == key:
                return item
        for item in value.values():
            found = _find(item, key)
            if found is not None:
                return found
    return None
