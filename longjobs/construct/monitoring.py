"""What an operator watches in the console: one dashboard, alarms, and the topic the alarms notify."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cw
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_glue as glue
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from longjobs.construct.constants import BACKLOG_DRAIN_ALARM, METRICS_NAMESPACE
from longjobs.construct.keys import allow_alarms, service_key
from longjobs.engine.observability import TYPE_DIMENSION, MetricName

PERIOD = cdk.Duration.minutes(5)


@dataclass(frozen=True)
class Watched:
    """The resources the dashboard and alarms read."""

    queue: sqs.IQueue
    dlq: sqs.IQueue
    receiver: lambda_.IFunction
    extender: lambda_.IFunction
    watcher: lambda_.IFunction
    state_machine: sfn.IStateMachine
    service: str  # the `service` dimension the functions publish their metrics under
    glue_jobs: Mapping[str, glue.IJob] = field(default_factory=dict)  # by job type
    waiting: Mapping[str, sqs.IQueue] = field(default_factory=dict)  # each limited type's waiting queue
    job_types: tuple[str, ...] = ()  # the types whose attempts run in the workflow (each one's cost)


def engine_metric(name: str, *, service: str, statistic: str = cw.Stats.SUM, label: str | None = None) -> cw.Metric:
    """A metric the functions publish through Powertools (namespace and `service` dimension)."""
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": service},
        statistic=statistic,
        period=PERIOD,
        label=label or name,
    )


def type_metric(
    name: str,
    job_type: str,
    *,
    service: str,
    statistic: str = cw.Stats.MAXIMUM,
    label: str | None = None,
) -> cw.Metric:
    """A metric of one job type (`longjobs.engine.observability.type_metric`: the `job_type` dimension)."""
    return cw.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": service, TYPE_DIMENSION: job_type},
        statistic=statistic,
        period=PERIOD,
        label=label or f"{name} ({statistic.lower()})",
    )


def cost_graph(job_types: Sequence[str], service: str) -> cw.GraphWidget:
    """What the ended attempts of each type cost (dollars at list price, `longjobs.engine.cost`), and on the
    right how long their runs took."""
    return _graph(
        "Cost of ended attempts (USD, list price)",
        [
            type_metric(MetricName.ATTEMPT_COST, name, service=service, statistic=cw.Stats.SUM, label=name)
            for name in job_types
        ],
        right=[
            type_metric(
                MetricName.ATTEMPT_RUNNER_SECONDS, name, service=service, statistic="p90", label=f"{name} run time p90"
            )
            for name in job_types
        ],
    )


def admission_graph(job_type: str, waiting: sqs.IQueue, service: str) -> cw.GraphWidget:
    """A limited type: slots in use, messages waiting in flight and parked (ours and SQS's count of the
    waiting queue); on the right, how long admitted messages waited for their slot."""
    return _graph(
        f"Admission: {job_type}",
        [
            type_metric(MetricName.SLOTS_IN_USE, job_type, service=service),
            type_metric(MetricName.WAITING_MESSAGES, job_type, service=service),
            type_metric(MetricName.PARKED_MESSAGES, job_type, service=service),
            waiting.metric_approximate_number_of_messages_visible(
                period=PERIOD, statistic="Maximum", label="waiting queue: visible"
            ),
        ],
        right=[
            type_metric(MetricName.ADMISSION_DELAY, job_type, service=service, statistic="p90"),
            type_metric(MetricName.ADMISSION_DELAY, job_type, service=service),
        ],
    )


def total(label: str, **metrics: cw.IMetric) -> cw.MathExpression:
    """The sum of `metrics` (keyword names are the expression's ids), for one alarm on several counts."""
    return cw.MathExpression(expression=" + ".join(metrics), using_metrics=metrics, period=PERIOD, label=label)


RECEIVED = (
    MetricName.JOBS_STARTED,
    MetricName.JOBS_INLINE,
    MetricName.JOBS_FANNED_OUT,
    MetricName.JOBS_WAITING,
    MetricName.JOBS_WAITING_FOR_SLOT,
    MetricName.JOBS_PARKED,
    MetricName.PARKED_DUPLICATES,
    MetricName.JOBS_ALREADY_SUCCEEDED,
    MetricName.JOBS_ALREADY_CANCELLED,
    MetricName.JOBS_SETTLED_ON_REDELIVERY,
    MetricName.JOBS_NOT_STARTED,
    MetricName.RECORDS_STALE,
    MetricName.JOBS_IGNORED,
    MetricName.S3_OBJECTS_IGNORED,
    MetricName.JOBS_REJECTED,
    MetricName.RECORDS_FAILED,
)
"""The receiver's counts by outcome, graphed under "Jobs received" (`RedeliveredWhileRunning`, a lapse, is
graphed with the lapses)."""


DLQ_ARRIVAL_PERIODS = 3
"""The minutes `DlqArrivals` looks back over: an arrival raises it if any of them rose (1 of 3)."""


def dlq_arrivals(dlq: sqs.IQueue) -> cw.MathExpression:
    """Messages that arrived in the DLQ a minute: its rise in depth, visible and in flight (an operator
    reading it moves messages between the two), whether the receiver sent them or SQS's redrive moved them.
    An alarm on the depth itself would stay in ALARM while any message stays (a cancelled one stays 14
    days), and tell of no new one; SQS's `NumberOfMessagesSent` misses the messages its redrive moves
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-available-cloudwatch-metrics.html).

    The depth is filled before its difference is taken. SQS publishes a queue's metrics only while it is
    active: for six hours after it held a message or was called
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-monitoring-using-cloudwatch.html).
    A healthy processor's DLQ is empty and idle, so the first message after a quiet spell is the first
    data point there is: `DIFF` has nothing before it to subtract, and an unfilled depth would never show
    that arrival. The gaps before the first point count as empty (`FILL(..., 0)`); a gap after a point
    (a minute SQS has not published yet) repeats it (`FILL(..., REPEAT)`), so a late minute reads as no
    change rather than as the DLQ emptied (https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/using-metric-math.html).
    Filled, the newest minute is a repeat, not the rise: the alarm looks at `DLQ_ARRIVAL_PERIODS` minutes."""
    minute = cdk.Duration.minutes(1)
    return cw.MathExpression(
        expression="DIFF(FILL(FILL(visible + hidden, REPEAT), 0))",
        using_metrics={
            "visible": dlq.metric_approximate_number_of_messages_visible(period=minute, statistic="Maximum"),
            "hidden": dlq.metric_approximate_number_of_messages_not_visible(period=minute, statistic="Maximum"),
        },
        period=minute,
        label="messages that arrived in the DLQ",
    )


def glue_count(job: glue.IJob, name: str) -> cw.Metric:
    """A Glue job's count metric: a delta since its last report, so summed
    (https://docs.aws.amazon.com/glue/latest/dg/monitoring-awsglue-with-cloudwatch-metrics.html)."""
    return job.metric(name, glue.MetricType.COUNT, period=PERIOD, statistic="Sum")


class Monitoring(Construct):
    """A dashboard for the whole path (queue, leases, renewals, executions, Glue, functions) and
    alarms on what needs a person: a message arriving in the DLQ, a message far older than a job runs,
    extender errors or an extender that stopped running, lapses, lost or capped leases, and failed
    executions. Alarms notify an SNS topic encrypted with its own key, or with `key` (the `kms_key`
    setting) when given; `alarm_email` subscribes an address to it."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dashboard_name: str | None,
        watched: Watched,
        oldest_message_threshold: cdk.Duration,
        alarm_email: str | None,
        key: kms.IKey | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        w = watched
        engine = partial(engine_metric, service=w.service)
        if key is None:
            key = service_key(self, "TopicKey", description="Long-jobs alarm topic")
        allow_alarms(key)
        self.topic = sns.Topic(self, "AlarmTopic", master_key=key, enforce_ssl=True, display_name="Long jobs alarms")
        if alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(alarm_email))

        self.alarms = [
            self._alarm(
                "DlqArrivals",
                dlq_arrivals(w.dlq),
                threshold=1,
                description="A message reached the dead-letter queue: see its ErrorType and ErrorMessage attributes.",
                evaluation_periods=DLQ_ARRIVAL_PERIODS,
                datapoints_to_alarm=1,
            ),
            self._alarm(
                "OldestMessageAge",
                w.queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
                threshold=oldest_message_threshold.to_seconds(),
                operator=cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
                description="A job message is older than a job may run: no receiver takes it, or it is held "
                "longer than its job may run. SQS leaves out a message received three times or more.",
            ),
            self._alarm(
                "ExtenderErrors",
                total(
                    "extender errors and failed passes",
                    errors=w.extender.metric_errors(period=PERIOD, statistic="Sum"),
                    passes=engine(MetricName.EXTENDER_PASS_FAILURES),
                    unrecorded=engine(MetricName.RENEWALS_NOT_RECORDED),
                ),
                threshold=1,
                description="The extender failed, a pass of it failed, or renewals SQS accepted were not recorded: "
                "leases may not be renewed (its log says which).",
            ),
            self._alarm(
                "ExtenderNotRunning",
                w.extender.metric_invocations(period=PERIOD, statistic="Sum"),
                threshold=1,
                operator=cw.ComparisonOperator.LESS_THAN_THRESHOLD,
                missing=cw.TreatMissingData.BREACHING,
                # While any data point is in the alarm's evaluation range, CloudWatch judges by the most recent
                # ones and ignores the missing-data setting (https://docs.aws.amazon.com/AmazonCloudWatch/latest/
                # monitoring/alarms-and-missing-data.html): the alarm comes some periods after the last run.
                description="The extender has not run for 5 minutes or more: nothing renews leases.",
            ),
            self._alarm(
                "Lapses",
                total(
                    "lapses",
                    lapses=engine(MetricName.LAPSES),
                    redelivered=engine(MetricName.REDELIVERED_WHILE_RUNNING),
                ),
                threshold=1,
                description="A message became visible while its job ran (a lapse).",
            ),
            self._alarm(
                "LeasesLostOrCapped",
                total(
                    "lost or capped leases",
                    lost=engine(MetricName.LEASES_LOST),
                    capped=engine(MetricName.LEASES_CAPPED),
                ),
                threshold=1,
                description="A lease lost its receipt handle or reached the renewal limit: its execution was "
                "stopped (ExecutionsStopped) and its message is back.",
            ),
            self._alarm(
                "FailedExecutions",
                total(
                    "executions failed, timed out or aborted",
                    failed=w.state_machine.metric_failed(period=PERIOD),
                    timedout=w.state_machine.metric_timed_out(period=PERIOD),
                    aborted=w.state_machine.metric_aborted(period=PERIOD),
                ),
                threshold=1,
                description="A job's execution failed: its message was released for a retry or will reach the DLQ.",
            ),
            *[
                self._alarm(
                    f"BacklogDrain{index}",
                    type_metric(MetricName.BACKLOG_DRAIN_TIME, name, service=w.service),
                    threshold=BACKLOG_DRAIN_ALARM.to_seconds(),
                    description=f"Job type {name}: its waiting and parked messages are expected to take longer "
                    f"than {BACKLOG_DRAIN_ALARM.to_days()} days to start (each is sent again before the queue's "
                    "retention runs out). Raise its max_concurrency or slow its producers.",
                )
                for index, name in enumerate(sorted(w.waiting))
            ],
        ]

        self.dashboard = cw.Dashboard(
            self, "Dashboard", dashboard_name=dashboard_name, default_interval=cdk.Duration.hours(3)
        )
        self.dashboard.add_widgets(
            _graph(
                "Jobs queue",
                [
                    w.queue.metric_approximate_number_of_messages_visible(label="waiting"),
                    w.queue.metric_approximate_number_of_messages_not_visible(label="in flight (leased)"),
                ],
                right=[w.queue.metric_approximate_age_of_oldest_message(label="oldest message age (s)")],
            ),
            _graph("Dead-letter queue", [w.dlq.metric_approximate_number_of_messages_visible(label="messages")]),
            _graph(
                "Leases",
                [
                    engine(MetricName.RENEWALS),
                    engine(MetricName.LEASES_COMPLETED),
                    engine(MetricName.LEASES_RELEASED),
                ],
                right=[engine(MetricName.TIME_LEFT_AT_RENEWAL, statistic=cw.Stats.MINIMUM)],
            ),
            _graph(
                "Renewal failures by class",
                [
                    engine(MetricName.RENEWAL_FAILURES_THROTTLED),
                    engine(MetricName.RENEWAL_FAILURES_OTHER),
                    engine(MetricName.RENEWALS_GIVEN_UP),
                    engine(MetricName.LEASE_CONFLICTS),
                    engine(MetricName.RECONCILE_FAILURES),
                    engine(MetricName.RENEWALS_NOT_RECORDED),
                    engine(MetricName.RELEASES_REASSERTED),
                    engine(MetricName.EXTENDER_PASS_FAILURES),
                ],
            ),
            _graph(
                "Lapses, capped and lost leases, stopped executions",
                [
                    engine(MetricName.LAPSES),
                    engine(MetricName.REDELIVERED_WHILE_RUNNING),
                    engine(MetricName.LEASES_CAPPED),
                    engine(MetricName.LEASES_LOST),
                    engine(MetricName.EXECUTIONS_STOPPED),
                ],
            ),
            _graph(
                "Jobs received",
                [engine(name) for name in RECEIVED],
            ),
            _graph(
                "Executions",
                [
                    w.state_machine.metric_started(period=PERIOD, label="started"),
                    w.state_machine.metric_succeeded(period=PERIOD, label="succeeded"),
                    w.state_machine.metric_failed(period=PERIOD, label="failed"),
                    w.state_machine.metric_timed_out(period=PERIOD, label="timed out"),
                    w.state_machine.metric_aborted(period=PERIOD, label="aborted"),
                ],
            ),
            *[
                _graph(
                    "Glue job runs" if len(w.glue_jobs) == 1 else f"Glue job runs: {name}",
                    [
                        glue_count(job, "glue.driver.aggregate.numCompletedTasks"),
                        glue_count(job, "glue.driver.aggregate.numFailedTasks"),
                    ],
                    right=[glue_count(job, "glue.driver.aggregate.elapsedTime")],
                )
                for name, job in w.glue_jobs.items()
            ],
            _graph(
                "Function errors and throttles",
                [
                    metric
                    for name, function in (("receiver", w.receiver), ("extender", w.extender), ("watcher", w.watcher))
                    for metric in (
                        function.metric_errors(period=PERIOD, label=f"{name} errors"),
                        function.metric_throttles(period=PERIOD, label=f"{name} throttles"),
                    )
                ],
            ),
            *([cost_graph(w.job_types, w.service)] if w.job_types else []),
            *[admission_graph(name, queue, w.service) for name, queue in sorted(w.waiting.items())],
            cw.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms), width=24, height=4),
        )

    def _alarm(
        self,
        name: str,
        metric: cw.IMetric,
        *,
        threshold: float,
        description: str,
        operator: cw.ComparisonOperator = cw.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        missing: cw.TreatMissingData = cw.TreatMissingData.NOT_BREACHING,
        evaluation_periods: int = 1,
        datapoints_to_alarm: int | None = None,
    ) -> cw.Alarm:
        alarm = cw.Alarm(
            self,
            name,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=datapoints_to_alarm,
            comparison_operator=operator,
            treat_missing_data=missing,
            alarm_description=description,
        )
        alarm.add_alarm_action(cw_actions.SnsAction(self.topic))
        alarm.add_ok_action(cw_actions.SnsAction(self.topic))
        return alarm


def _graph(title: str, left: list[cw.IMetric], *, right: list[cw.IMetric] | None = None) -> cw.GraphWidget:
    return cw.GraphWidget(title=title, left=left, right=right or [], width=8, height=6)
