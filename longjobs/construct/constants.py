"""Fixed names and numbers of the deployed stack, in one place.

What an operator may change is a CDK context setting (`longjobs.construct.config`); what is here is part of the
design: changing it means changing code or docs elsewhere too.
"""

from __future__ import annotations

import re
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs

from longjobs.engine.settings import EXTENDER_TIMEOUT_S, SQS_MAX_RETENTION_S

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
"""The installed `longjobs` package: the Lambda and Glue assets are cut from it (`engine/`, `pipeline/`)."""

APP_NAME = "LongJobs"
"""Stack name prefix (`LongJobs-<stage>`) and the dashboard's name prefix."""

# Metrics: the names Powertools publishes under (longjobs/engine/observability.py reads these two from the
# environment, and the stack sets them, so the dashboard and alarms find what the functions emit).
METRICS_NAMESPACE = "LongJobs"
SERVICE_NAME = "long-jobs"
"""The Powertools service outside a stack (the cold-start benchmark's environment). A stack's processor
publishes under a service of its own (`LongJobProcessor.metrics_service`)."""

# Lambda
LAMBDA_RUNTIME = lambda_.Runtime.PYTHON_3_13
"""The project's Python (pyproject, ruff, mypy, the tests) and Glue 6.0's; Lambda supports it until 2029-06-30
(https://docs.aws.amazon.com/lambda/latest/dg/lambda-runtimes.html). Glue 5.x runs Python 3.11: the code
shipped to Glue stays valid 3.11 (ruff's per-file target version, tests/processes/test_python_versions.py)."""
LAMBDA_ARCHITECTURE = lambda_.Architecture.ARM_64
POWERTOOLS_VERSION = "3.37.0"
"""The Powertools layer deployed: the locked version and the range's lower bound in pyproject.toml (a test
checks both)."""
OTEL_WRAPPER = "/opt/otel-instrument"
"""The AWS Distro for OpenTelemetry Python layer's wrapper script (AWS_LAMBDA_EXEC_WRAPPER)."""
POWERTOOLS_LAYER_PARAMETER = (
    f"/aws/service/powertools/python/{LAMBDA_ARCHITECTURE.name}/{LAMBDA_RUNTIME.name}/{POWERTOOLS_VERSION}"
)
"""Public SSM parameter that Powertools publishes in every commercial region for each release, one per
architecture and Python version (`/aws/service/powertools/python/{arch}/{python_version}/{version}`); its
value is the ARN of that release's layer built for that Python, here
`arn:aws:lambda:<region>:017000801446:layer:AWSLambdaPowertoolsPythonV3-python313-arm64:<N>` (Powertools'
"Lambda Layer" and "Using SSM Parameter Store",
https://docs.aws.amazon.com/powertools/python/latest/getting-started/install/). CloudFormation resolves it
at deploy time, so the layer is pinned to the package version without a hand-copied layer number, and
follows the runtime: a layer's compiled packages (pydantic-core) load only on the Python they were built
for. The `powertools_layer_arn` context setting overrides it."""
POWERTOOLS_LAYER_NAMES = re.compile(r"AWSLambdaPowertoolsPython(V\d+)?(-python\d+)?(-(x86_64|arm64|Arm64))?")
"""The names of Powertools' published Python layers: v1's, v2's (`...V2`, `...V2-Arm64`) and v3's, one per
Python and architecture (`...V3-python313-arm64`)."""
POWERTOOLS_LAYER_NAME = f"AWSLambdaPowertoolsPythonV3-{LAMBDA_RUNTIME.name.replace('.', '')}-{LAMBDA_ARCHITECTURE.name}"
"""The name of the Powertools layer built for the functions (`AWSLambdaPowertoolsPythonV3-python313-arm64`),
as Powertools publishes it in every partition
(https://docs.aws.amazon.com/powertools/python/latest/getting-started/install/)."""
HANDLERS = {
    "receiver": "longjobs.functions.receiver.handler",
    "extender": "longjobs.functions.extender.handler",
    "watcher": "longjobs.functions.watcher.handler",
}
EXTENDER_PERIOD = cdk.Duration.minutes(1)
"""EventBridge Scheduler's floor; the extender loops inside an invocation for sub-minute policies."""
EXTENDER_TIMEOUT = cdk.Duration.seconds(EXTENDER_TIMEOUT_S)
WATCHER_TIMEOUT = cdk.Duration.seconds(30)
EXTENDER_RESERVED_CONCURRENCY = 1
"""The extender's reserved concurrency with `reserve_concurrency`: one run at a time."""
WATCHER_RESERVED_CONCURRENCY = 5
"""The watcher's reserved concurrency with `reserve_concurrency`: status events arrive in bursts (a type's
backlog ending); a few instances keep up, and the rest of the account's concurrency stays for the receiver."""
GLUE_SCRIPT = PACKAGE_ROOT / "pipeline" / "glue_entry.py"
"""The script of every pyspark job type's Glue job: it imports the type's entry and calls it."""
JOB_TYPES_FILE = "job_types.json"
"""The job catalog the construct writes into the functions' asset (`longjobs/engine/job_types.json`)."""

# Glue
GLUE_VERSIONS = {"5.0": "V5_0", "5.1": "V5_1", "6.0": "V6_0"}
"""The Glue versions a pyspark type may run on: 6.0 (Spark 4.1.1, Python 3.13), the default, whose Spark the
offline runtime runs, and 5.0 and 5.1 (Spark 3.5, Python 3.11), for which the shipped code stays valid 3.11."""
GLUE_TEMP_PREFIX = "temp/"
SUMMARY_PREFIX = "summaries/"
"""Where each Glue run writes its summary JSON (`<execution name>.json`) for the workflow to read."""

# CDK feature flags the processor's resources are built and cdk-nag-checked with. The construct sets
# them on its own scope (a user's app may have none): S3 access logs through a bucket policy (the log
# bucket enforces bucket-owner ownership, which ACL delivery cannot use), minimized IAM policies (the
# acknowledged cdk-nag findings name their resources) and scoped-down key policies.
FEATURE_FLAGS = {
    "@aws-cdk/aws-s3:serverAccessLogsUseBucketPolicy": True,
    "@aws-cdk/aws-s3:createDefaultLoggingPolicy": True,
    "@aws-cdk/aws-iam:minimizePolicies": True,
    "@aws-cdk/aws-kms:reduceCrossAccountRegionPolicyScope": True,
}

# Step Functions
STATE_MACHINE_TIMEOUT = cdk.Duration.hours(13)
"""A safety net past SQS's 12 h receive limit: nothing can keep a message hidden longer anyway."""

# Buckets
TEMP_EXPIRATION = cdk.Duration.days(7)
SUMMARY_EXPIRATION = cdk.Duration.days(30)
ACCESS_LOG_EXPIRATION = cdk.Duration.days(90)
ABORT_UPLOADS_AFTER = cdk.Duration.days(7)
NONCURRENT_EXPIRATION = cdk.Duration.days(30)
"""Every bucket is versioned: a raw or curated object overwritten or deleted can be recovered this long
(the temporary data of the others keeps its old versions as long as the data itself)."""

# Queues
BACKLOG_DRAIN_ALARM = cdk.Duration.days(10)
"""A limited type's backlog expected to take this long to start alarms (`BacklogDrainTime`): the queues
keep a message up to 14 days (`queue_retention_s`); its waiting messages are sent again before theirs runs
out, but a backlog this old means its producers outpace it."""
DLQ_RETENTION = cdk.Duration.seconds(SQS_MAX_RETENTION_S)
"""SQS's maximum too. The processor's own DLQ sends are new messages with the whole of it; a message the
redrive backstop moves keeps its first enqueue time (standard queues), so it may expire sooner."""

# Logs: CloudWatch's allowed retentions, in days (the `log_retention_days` context setting).
LOG_RETENTION = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}

SNAPSTART_UNAVAILABLE_REGIONS = frozenset({"ap-southeast-6", "ap-east-2"})
"""Commercial regions without Lambda SnapStart: Asia Pacific (New Zealand) and (Taipei)
(https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html, "Supported Regions")."""
