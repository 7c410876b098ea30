"""The synthesized stack's properties that matter, read from the CloudFormation template."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from importlib.util import cache_from_source
from pathlib import Path
from typing import Any

import pytest
from aws_cdk.assertions import Match

from longjobs.construct.nag import render_cfn
from longjobs.engine.jobs.builtin import MAX_WAIT_S
from longjobs.engine.jobs.published import CATALOG_KEY
from longjobs.engine.lease.schema import table_definition
from longjobs.engine.settings import Settings
from tests import REPO_ROOT
from tests.infra.conftest import PROD_CONTEXT, Synth, synthesize

DAY_S = 86_400


def policy_grants(synth: Synth, role_logical_id: str) -> set[tuple[str, str]]:
    """Every (action, resource) an inline policy of the role allows, resources rendered as text."""
    grants = set()
    for policy in synth.of_type("AWS::IAM::Policy").values():
        if {"Ref": role_logical_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            assert statement["Effect"] == "Allow"
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            grants |= {(action, render_cfn(resource)) for action in actions for resource in resources}
    return grants


def function_role(synth: Synth, function: Any) -> str:
    role_arn = synth.resource(function)["Properties"]["Role"]
    return str(role_arn["Fn::GetAtt"][0])


def definition(synth: Synth) -> dict[str, Any]:
    """The state machine's definition; references inside it rendered as `<LogicalId>` text."""
    [machine] = synth.of_type("AWS::StepFunctions::StateMachine").values()
    return dict(json.loads(render_cfn(machine["Properties"]["DefinitionString"])))


# Queues


def test_queue_is_encrypted_tls_only_and_redrives_to_the_dlq(dev: Synth, prod: Synth) -> None:
    queues = dev.part("Queues")
    queue, dlq = dev.resource(queues.queue)["Properties"], dev.resource(queues.dlq)["Properties"]
    assert queue["SqsManagedSseEnabled"] is True and dlq["SqsManagedSseEnabled"] is True
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dev.logical_id(queues.dlq), "Arn"]},
        "maxReceiveCount": 379,
    }, "a backstop far above max_attempts 5: 5 x 3 + 1 receives of attempts, 343 of waiting (docs/admission.md)"
    assert dlq["MessageRetentionPeriod"] == queue["MessageRetentionPeriod"] == 14 * DAY_S, "SQS's maximum"
    for target in (queues.queue, queues.dlq):
        dev.assertions.has_resource_properties(
            "AWS::SQS::QueuePolicy",
            {
                "Queues": [{"Ref": dev.logical_id(target)}],
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [
                            Match.object_like(
                                {
                                    "Effect": "Deny",
                                    "Action": "sqs:*",
                                    "Principal": {"AWS": "*"},
                                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                                }
                            )
                        ]
                    )
                },
            },
        )
    prod_queue = prod.resource(prod.part("Queues").queue)["Properties"]
    prod_attempts = Settings(max_attempts=int(PROD_CONTEXT["max_attempts"]))
    assert prod_queue["RedrivePolicy"]["maxReceiveCount"] == prod_attempts.redrive_max_receives(14 * DAY_S)


def test_queue_visibility_timeout_covers_the_receiver_timeout(dev: Synth) -> None:
    functions = dev.part("Functions")
    queue = dev.resource(dev.part("Queues").queue)["Properties"]
    receiver = dev.resource(functions.receiver)["Properties"]
    assert queue["VisibilityTimeout"] >= receiver["Timeout"]


# Lease table


def test_lease_table_has_pitr_ttl_and_the_indexes_the_store_queries(dev: Synth) -> None:
    """The deployed table has the keys and every index of the table the offline runtime and the tests
    create (`table_definition`): the store queries `waiting` for admission, and DynamoDB refuses a query
    on an index the table lacks ("The table does not have the specified index")."""
    table = dev.resource(dev.part("Leases").table)
    props = table["Properties"]
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["TimeToLiveSpecification"] == {"AttributeName": "expires_at", "Enabled": True}
    created = table_definition("leases")
    assert props["KeySchema"] == created["KeySchema"]
    assert sorted(props["AttributeDefinitions"], key=str) == sorted(created["AttributeDefinitions"], key=str)
    assert props["GlobalSecondaryIndexes"] == created["GlobalSecondaryIndexes"]
    assert [index["IndexName"] for index in props["GlobalSecondaryIndexes"]] == ["due", "reconcile", "waiting"]
    assert props["DeletionProtectionEnabled"] is False and table["DeletionPolicy"] == "Delete"


def test_queues_are_retained_with_their_messages_in_prod_only(dev: Synth, prod: Synth) -> None:
    """With `deletion_protection` (on for prod) the queues outlive the stack and a replacement, as the
    lease table does. CloudFormation's `DeletionPolicy` applies when the stack is deleted, and its
    `UpdateReplacePolicy` to the old resource a replacement leaves: `Delete` deletes the queue and the
    messages in it (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-updatereplacepolicy.html)."""
    for synth, policy in ((dev, "Delete"), (prod, "Retain")):
        queues = synth.part("Queues")
        made = [queues.queue, queues.dlq, *queues.waiting.values()]
        assert queues.waiting, "a waiting queue per job type"
        for queue in made:
            resource = synth.resource(queue)
            assert (resource["DeletionPolicy"], resource["UpdateReplacePolicy"]) == (policy, policy), queue
        # A kept queue keeps its TLS-only policy (a policy deleted with the stack would leave it open to HTTP).
        ids = [{"Ref": synth.logical_id(queue)} for queue in made]
        policies = [
            r
            for r in synth.resources.values()
            if r["Type"] == "AWS::SQS::QueuePolicy" and r["Properties"]["Queues"][0] in ids
        ]
        assert len(policies) == len(made)
        assert all(p.get("DeletionPolicy", "Delete") == policy for p in policies), policies


def test_lease_table_is_protected_and_retained_in_prod(prod: Synth) -> None:
    table = prod.resource(prod.part("Leases").table)
    assert table["Properties"]["DeletionProtectionEnabled"] is True
    assert table["DeletionPolicy"] == "Retain"


# Functions


def test_functions_run_arm64_python313_traced_with_the_pinned_powertools_layer(dev: Synth) -> None:
    functions = dev.part("Functions")
    for function, handler in (
        (functions.receiver, "longjobs.functions.receiver.handler"),
        (functions.extender, "longjobs.functions.extender.handler"),
        (functions.watcher, "longjobs.functions.watcher.handler"),
    ):
        props = dev.resource(function)["Properties"]
        assert props["Handler"] == handler
        assert props["Runtime"] == "python3.13" and props["Architectures"] == ["arm64"]
        assert props["TracingConfig"] == {"Mode": "Active"}, "tracing=service: Lambda's own trace"
        assert props["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true", "no X-Ray SDK import"
        assert props["Layers"] == ["{{resolve:ssm:/aws/service/powertools/python/arm64/python3.13/3.37.0}}"]
        assert props["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"] == "LongJobs"
        assert props["Environment"]["Variables"]["PYDANTIC_DISABLE_PLUGINS"] == "__all__", "a smaller cold start"
        log_group = dev.resources[props["LoggingConfig"]["LogGroup"]["Ref"]]
        assert log_group["Properties"]["RetentionInDays"] == 365, "a year by default"


def test_state_machine_traced_unless_tracing_is_off(dev: Synth, prod: Synth) -> None:
    for synth, enabled in ((dev, True), (prod, False)):
        [machine] = synth.of_type("AWS::StepFunctions::StateMachine").values()
        assert machine["Properties"].get("TracingConfiguration", {}).get("Enabled", False) is enabled


def test_functions_traced_by_opentelemetry_run_under_the_adot_layer(tmp_path: Path) -> None:
    layer = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-python-arm64-ver-1-32-0:1"
    otel = synthesize(tmp_path, {"tracing": "opentelemetry", "otel_layer_arn": layer})
    functions = otel.part("Functions")
    for function in (functions.receiver, functions.extender, functions.watcher):
        props = otel.resource(function)["Properties"]
        assert layer in props["Layers"] and len(props["Layers"]) == 2, "beside the Powertools layer"
        assert props["TracingConfig"] == {"Mode": "Active"}
        variables = props["Environment"]["Variables"]
        assert variables["AWS_LAMBDA_EXEC_WRAPPER"] == "/opt/otel-instrument"
        assert variables["OTEL_SERVICE_NAME"] == variables["POWERTOOLS_SERVICE_NAME"] == "LongJobs-dev"
        assert variables["POWERTOOLS_TRACE_DISABLED"] == "true", "spans come from ADOT, not the X-Ray SDK"
        assert variables["TRACING"] == "opentelemetry", "the watcher records a span per job"
    [machine] = otel.of_type("AWS::StepFunctions::StateMachine").values()
    assert machine["Properties"]["TracingConfiguration"]["Enabled"] is True, "the execution's own trace"


def test_watcher_hears_every_end_to_price_each_attempt_without_a_limited_type() -> None:
    import aws_cdk as cdk

    from longjobs.construct import LongJobProcessor
    from longjobs.engine.jobs import JobType

    def watched(infra: dict[str, str]) -> list[str]:
        stack = cdk.Stack(cdk.App(), "Unlimited")
        bounded = {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_S}
        seconds = {"type": "object", "required": ["seconds"], "properties": {"seconds": bounded}}
        only_waits = [JobType(name="pause", runner="wait", params_schema=seconds)]
        LongJobProcessor(
            stack, "Jobs", job_types=only_waits, include_builtin_job_types=False, s3_triggers=[], infra=infra
        )
        [rule] = cdk.assertions.Template.from_stack(stack).find_resources("AWS::Events::Rule").values()
        return sorted(rule["Properties"]["EventPattern"]["detail"]["status"])

    layer = "arn:aws:lambda:us-east-1:901920570463:layer:aws-otel-python-arm64-ver-1-32-0:1"
    every_end = ["ABORTED", "FAILED", "SUCCEEDED", "TIMED_OUT"]
    assert watched({}) == every_end, "no slot to free, but every attempt is priced"
    assert watched({"tracing": "opentelemetry", "otel_layer_arn": layer}) == every_end, "every end is a job's span"


def test_functions_without_tracing_skip_xray_entirely(prod: Synth) -> None:
    functions = prod.part("Functions")
    for function in (functions.receiver, functions.extender, functions.watcher):
        props = prod.resource(function)["Properties"]
        assert "TracingConfig" not in props or props["TracingConfig"] == {"Mode": "PassThrough"}
        assert props["Environment"]["Variables"]["POWERTOOLS_TRACE_DISABLED"] == "true", "no X-Ray SDK import"
        assert not any(action.startswith("xray:") for action, _ in policy_grants(prod, function_role(prod, function)))


def test_functions_layer_and_log_retention_follow_context(prod: Synth) -> None:
    for log_group in prod.of_type("AWS::Logs::LogGroup").values():
        assert log_group["Properties"]["RetentionInDays"] == 90


def test_functions_asset_holds_the_functions_and_the_engine_only(dev: Synth) -> None:
    code = dev.resource(dev.part("Functions").receiver)["Properties"]["Code"]
    asset_hash = code["S3Key"].removesuffix(".zip")
    staged = dev.outdir / f"asset.{asset_hash}"
    files = {path.relative_to(staged).as_posix() for path in staged.rglob("*") if path.is_file()}
    assert "longjobs/functions/receiver.py" in files and "longjobs/engine/settings.py" in files
    sources = {name for name in files if name.endswith(".py")}
    compiled = {name for name in files if name.endswith(".pyc")}
    assert files - sources - compiled == {"longjobs/engine/job_types.json"}, sorted(files)
    assert all(
        name == "longjobs/__init__.py" or name.startswith(("longjobs/functions/", "longjobs/engine/"))
        for name in sources
    )
    assert compiled == {cache_from_source(name) for name in sources}  # each module compiled (compile_for_lambda)


def shipped_catalog(dev: Synth) -> dict[str, Any]:
    """The job catalog in the functions' asset (`longjobs/engine/job_types.json`)."""
    code = dev.resource(dev.part("Functions").receiver)["Properties"]["Code"]
    shipped = dev.outdir / f"asset.{code['S3Key'].removesuffix('.zip')}" / "longjobs" / "engine" / "job_types.json"
    return dict(json.loads(shipped.read_text()))


def test_functions_asset_carries_the_job_catalog_of_jobs_json(dev: Synth) -> None:
    catalog = shipped_catalog(dev)
    types = {t["name"]: t for t in catalog["job_types"]}
    assert list(types) == ["spark", "wait", "echo", "wordcount", "textstats"]
    assert types["wordcount"]["params_schema"]["required"] == ["input"]
    assert catalog["s3_triggers"] == [
        {
            "bucket": None,
            "prefix": "",
            "marker": "_SUCCESS",
            "job_type": "spark",
            "params": {"input": "s3://{bucket}/{prefix}", "date": "{date}"},
        }
    ]


def test_receiver_environment_names_its_resources(dev: Synth) -> None:
    variables = dev.resource(dev.part("Functions").receiver)["Properties"]["Environment"]["Variables"]
    rendered = {name: render_cfn(value) for name, value in variables.items()}
    workflow = dev.part("Workflow")
    assert rendered["STATE_MACHINE_ARN"] == f"<{dev.logical_id(workflow.state_machine)}>"
    assert rendered["CURATED_URI"] == f"s3://<{dev.logical_id(workflow.buckets.curated)}>/"
    assert rendered["RAW_URI"] == f"s3://<{dev.logical_id(workflow.buckets.raw)}>/"
    assert {"TABLE_NAME", "QUEUE_URL", "DLQ_URL", "QUARANTINE_URI", "EXTENDER_PERIOD_S"} <= set(rendered)
    assert "JOB_TYPES_FILE" not in rendered, "the catalog ships in the asset (no 4 KB limit)"


def test_receiver_mapping_reports_batch_item_failures_with_max_concurrency(dev: Synth, prod: Synth) -> None:
    for synth, concurrency in ((dev, 10), (prod, int(PROD_CONTEXT["receiver_max_concurrency"]))):
        synth.assertions.has_resource_properties(
            "AWS::Lambda::EventSourceMapping",
            {
                "EventSourceArn": {"Fn::GetAtt": [synth.logical_id(synth.part("Queues").queue), "Arn"]},
                "FunctionName": {"Ref": synth.logical_id(synth.part("Functions").receiver)},
                "FunctionResponseTypes": ["ReportBatchItemFailures"],
                "ScalingConfig": {"MaximumConcurrency": concurrency},
                "BatchSize": 10,
            },
        )


def test_extender_runs_every_minute_from_eventbridge_scheduler_alone_when_concurrency_is_reserved(
    dev: Synth, prod: Synth
) -> None:
    assert "ReservedConcurrentExecutions" not in dev.resource(dev.part("Functions").extender)["Properties"]
    assert prod.resource(prod.part("Functions").extender)["Properties"]["ReservedConcurrentExecutions"] == 1
    extender = dev.part("Functions").extender
    [schedule] = dev.of_type("AWS::Scheduler::Schedule").values()
    props = schedule["Properties"]
    assert props["ScheduleExpression"] == "rate(1 minute)" and props["State"] == "ENABLED"
    assert props["Target"]["Arn"] == {"Fn::GetAtt": [dev.logical_id(extender), "Arn"]}
    assert props["Target"]["RetryPolicy"] == {"MaximumEventAgeInSeconds": 60, "MaximumRetryAttempts": 0}
    dev.assertions.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": {"Ref": dev.logical_id(extender)},
            "MaximumEventAgeInSeconds": 120,
            "MaximumRetryAttempts": 0,
        },
    )


def test_watcher_rule_matches_this_state_machines_ended_executions(dev: Synth) -> None:
    functions = dev.part("Functions")
    machine = dev.logical_id(dev.part("Workflow").state_machine)
    [rule] = dev.of_type("AWS::Events::Rule").values()
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.states"],
        "detail-type": ["Step Functions Execution Status Change"],
        # every end: a success frees a slot (its type's limit), and each attempt is priced; the order the
        # default stack always had, so a deploy leaves its rule as it was
        "detail": {"status": ["FAILED", "TIMED_OUT", "ABORTED", "SUCCEEDED"], "stateMachineArn": [{"Ref": machine}]},
    }
    [target] = rule["Properties"]["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [dev.logical_id(functions.watcher), "Arn"]}


# Least privilege: each role allows exactly what its code calls, on its own resources.


@pytest.fixture(scope="module")
def names(dev: Synth) -> dict[str, str]:
    workflow, queues = dev.part("Workflow"), dev.part("Queues")
    machine = dev.logical_id(workflow.state_machine)
    return {
        "queue": f"<{dev.logical_id(queues.queue)}.Arn>",
        "dlq": f"<{dev.logical_id(queues.dlq)}.Arn>",
        "table": f"<{dev.logical_id(dev.part('Leases').table)}.Arn>",
        "machine": f"<{machine}>",
        "executions": f"arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:<{machine}.Name>:*",
    }


def own_logs(synth: Synth, function: Any) -> set[tuple[str, str]]:
    log_group = synth.resource(function)["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    return {("logs:CreateLogStream", f"<{log_group}.Arn>"), ("logs:PutLogEvents", f"<{log_group}.Arn>")}


XRAY = {("xray:PutTelemetryRecords", "*"), ("xray:PutTraceSegments", "*")}


def test_receiver_role_allows_only_its_calls(dev: Synth, names: dict[str, str]) -> None:
    receiver = dev.part("Functions").receiver
    queue_actions = ["ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes", "ReceiveMessage", "SendMessage"]
    expected = {(f"sqs:{action}", names["queue"]) for action in queue_actions}
    expected |= {("sqs:GetQueueUrl", names["queue"])}  # part of the event source mapping's grant
    expected |= {("sqs:SendMessage", names["dlq"])}
    # ConditionCheckItem: an attempt taking its holds again checks its lease in the transaction
    expected |= {(f"dynamodb:{a}", names["table"]) for a in ("GetItem", "PutItem", "UpdateItem", "ConditionCheckItem")}
    expected |= {("states:StartExecution", names["machine"]), ("states:DescribeExecution", names["executions"])}
    # admission (the pyspark types are limited): park in the waiting queues, read the slots and the line
    expected |= {
        (f"sqs:{a}", w)
        # hides what it admits in place; a new arrival unparks the parked ones first (receive, delete)
        for a in ("SendMessage", "GetQueueAttributes", "ChangeMessageVisibility", "ReceiveMessage", "DeleteMessage")
        for w in waiting_queues(dev)
    }
    expected |= {("dynamodb:BatchGetItem", names["table"]), ("dynamodb:Query", names["table"] + "/index/waiting")}
    expected |= job_run_grants(dev)
    assert policy_grants(dev, function_role(dev, receiver)) == expected | own_logs(dev, receiver) | XRAY


def job_run_grants(dev: Synth) -> set[tuple[str, str]]:
    """A job's next attempt asks its type's Glue job about the previous run, and stops one still running
    (`longjobs.engine.runs`): on those jobs only."""
    jobs = dev.part("Workflow").glue_jobs.values()
    assert jobs
    return {
        (action, f"arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:job/<{dev.logical_id(job)}>")
        for action in ("glue:GetJobRuns", "glue:BatchStopJobRun")
        for job in jobs
    }


def waiting_queues(dev: Synth) -> set[str]:
    """The waiting queues' ARNs: one per job type, limited or not (a limit removed keeps its queue)."""
    waiting = dev.part("Queues").waiting
    assert sorted(waiting) == ["echo", "spark", "textstats", "wait", "wordcount"]
    return {f"<{dev.logical_id(queue)}.Arn>" for queue in waiting.values()}


def admission_grants(dev: Synth, names: dict[str, str]) -> set[tuple[str, str]]:
    """What an admission pass calls (the extender's and the watcher's): start a waiting message in place,
    free stale slots, unpark, send used-up attempts to the DLQ."""
    table = names["table"]
    # an unparked message may wait for its job id on the jobs queue, or be parked again
    grants = {(f"sqs:{a}", names["queue"]) for a in ("ChangeMessageVisibility", "GetQueueAttributes", "SendMessage")}
    grants |= {
        (f"sqs:{a}", w)
        for a in ("ReceiveMessage", "DeleteMessage", "ChangeMessageVisibility", "GetQueueAttributes", "SendMessage")
        for w in waiting_queues(dev)
    }
    grants |= {("sqs:SendMessage", names["dlq"]), ("dynamodb:Query", table + "/index/waiting")}
    grants |= {
        (f"dynamodb:{a}", table) for a in ("GetItem", "PutItem", "UpdateItem", "BatchGetItem", "ConditionCheckItem")
    }
    grants |= job_run_grants(dev)  # an admitted attempt waits for its job's previous run as the receiver's does
    return grants | {("states:StartExecution", names["machine"]), ("states:DescribeExecution", names["executions"])}


def test_extender_role_allows_only_its_calls(dev: Synth, names: dict[str, str]) -> None:
    extender = dev.part("Functions").extender
    expected = {
        (f"sqs:{a}", names["queue"]) for a in ("ChangeMessageVisibility", "DeleteMessage", "GetQueueAttributes")
    }
    expected |= {("dynamodb:Query", names["table"] + f"/index/{index}") for index in ("due", "reconcile")}
    expected |= {("dynamodb:GetItem", names["table"]), ("dynamodb:UpdateItem", names["table"])}
    # it stops the execution of a lease it can no longer hold (invariant 8)
    expected |= {("states:DescribeExecution", names["executions"]), ("states:StopExecution", names["executions"])}
    expected |= {("states:ListExecutions", names["machine"])}  # reconciliation's list of the running executions
    expected |= admission_grants(dev, names)
    assert policy_grants(dev, function_role(dev, extender)) == expected | own_logs(dev, extender) | XRAY


def test_watcher_role_allows_only_its_calls(dev: Synth, names: dict[str, str]) -> None:
    watcher = dev.part("Functions").watcher
    expected = {("sqs:ChangeMessageVisibility", names["queue"])}
    expected |= {("dynamodb:GetItem", names["table"]), ("dynamodb:UpdateItem", names["table"])}
    expected |= admission_grants(dev, names)
    failures = f"<{dev.logical_id(dev.part('Functions').watcher_failures)}.Arn>"  # its on-failure destination
    expected |= {(f"sqs:{action}", failures) for action in ("SendMessage", "GetQueueAttributes", "GetQueueUrl")}
    assert policy_grants(dev, function_role(dev, watcher)) == expected | own_logs(dev, watcher) | XRAY


def test_functions_roles_have_no_managed_policies(dev: Synth) -> None:
    functions = dev.part("Functions")
    for function in (functions.receiver, functions.extender, functions.watcher):
        role = dev.resources[function_role(dev, function)]
        assert "ManagedPolicyArns" not in role["Properties"]
        assert role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {
            "Service": "lambda.amazonaws.com"
        }


def test_state_machine_role_settles_the_jobs_queue_and_runs_the_glue_jobs_only(dev: Synth) -> None:
    """The Glue grants are the `.sync` pattern's, `glue:BatchStopJobRun` included: with it Step Functions
    stops the Glue run of an execution that is stopped (the processor stops an execution whose message it
    can no longer hold, and relies on this to stop its run). AWS Step Functions Developer Guide, "Start
    an AWS Glue job with Step Functions", IAM policies, Run a Job (.sync):
    https://docs.aws.amazon.com/step-functions/latest/dg/connect-glue.html"""
    workflow = dev.part("Workflow")
    role = render_cfn(dev.resource(workflow.state_machine)["Properties"]["RoleArn"]).split(".")[0].strip("<")
    grants = policy_grants(dev, role)
    queue = f"<{dev.logical_id(dev.part('Queues').queue)}.Arn>"
    settled = {queue, *waiting_queues(dev)}  # an unparked message runs from its type's waiting queue
    assert {(a, r) for a, r in grants if a.startswith("sqs:")} == {
        (f"sqs:{a}", q) for a in ("deleteMessage", "changeMessageVisibility") for q in settled
    }
    jobs = {
        f"arn:<AWS::Partition>:glue:<AWS::Region>:<AWS::AccountId>:job/<{dev.logical_id(job)}>"
        for job in workflow.glue_jobs.values()
    }
    assert len(jobs) == 3, "spark, wordcount and textstats"
    assert {(a, r) for a, r in grants if a.startswith("glue:")} == {
        (f"glue:{a}", job) for a in ("StartJobRun", "GetJobRun", "GetJobRuns", "BatchStopJobRun") for job in jobs
    }
    summaries = f"arn:<AWS::Partition>:s3:::<{dev.logical_id(workflow.buckets.glue)}>/summaries/*"
    assert {(a, r) for a, r in grants if a.startswith("s3:")} == {("s3:getObject", summaries)}
    table = f"<{dev.logical_id(dev.part('Leases').table)}>"
    assert {r for a, r in grants if a.startswith("dynamodb:")} == {
        f"arn:<AWS::Partition>:dynamodb:<AWS::Region>:<AWS::AccountId>:table/{table}"
    }
    wildcard_actions = {a for a, r in grants if r == "*"}
    assert all(a.startswith(("logs:", "xray:")) for a in wildcard_actions), wildcard_actions


def test_glue_role_reads_raw_and_writes_its_outputs_only(dev: Synth) -> None:
    workflow = dev.part("Workflow")
    role = render_cfn(dev.resource(workflow.glue_job)["Properties"]["Role"]).split(".")[0].strip("<")
    grants = policy_grants(dev, role)
    b = workflow.buckets
    raw, curated, quarantine, work = (f"<{dev.logical_id(x)}.Arn>" for x in (b.raw, b.curated, b.quarantine, b.glue))
    assert {r for a, r in grants if a in ("s3:PutObject", "s3:DeleteObject")} == {
        f"{curated}/*",
        f"{quarantine}/*",
        f"{work}/temp/*",
        f"{work}/summaries/*",
    }
    assert ("s3:DeleteObject", f"{work}/summaries/*") not in grants
    wheels = f"{work}/job-code/textstats/{wheels_key(dev).rsplit('/', 1)[1]}"  # its zip of wheels, nothing else
    assert {r for a, r in grants if a == "s3:GetObject"} == {
        f"{raw}/*",
        f"{curated}/*",
        f"{quarantine}/*",
        f"{work}/temp/*",
        wheels,
    }
    assert not any(raw in r and a != "s3:ListBucket" and a != "s3:GetObject" for a, r in grants)
    assert {a for a, r in grants if r == "*"} == {"cloudwatch:PutMetricData"}


# Workflow


def test_state_machine_runs_the_glue_step_and_settles_with_the_lease(dev: Synth) -> None:
    workflow = dev.part("Workflow")
    states = definition(dev)["States"]
    assert definition(dev)["StartAt"] == "Self"
    assert states["Self"]["Parameters"] == {"execution.$": "$$.Execution.Id"}
    assert states["OwnsLeaseAtStart"]["Choices"][0]["Next"] == "RunJob", "the job runs only while its lease names it"
    assert states["RunJob"]["Next"] == "HoldsSlotAtSuccess", (
        "the close and the holds first, conditional on the start's handle"
    )
    assert states["RunJob"]["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "ReadLeaseForRelease"}
    ]
    branch = states["RunJob"]["Branches"][0]["States"]
    assert [c["Next"] for c in branch["JobType"]["Choices"]] == [
        "RunSparkJob",
        "WaitThenFail",
        "Wait",
        "RunWordcountJob",
        "RunTextstatsJob",
    ]
    spark = branch["RunSparkJob"]
    assert spark["Resource"] == "arn:<AWS::Partition>:states:::glue:startJobRun.sync"
    assert spark["Parameters"]["JobName"] == f"<{dev.logical_id(workflow.glue_job)}>"
    assert spark["Parameters"]["Timeout"] == 360
    assert spark["TimeoutSeconds"] == 360 * 60 + 15 * 60, "the step times out too, so JobTimedOut can fire"
    summary_bucket = f"<{dev.logical_id(workflow.buckets.glue)}>"
    assert spark["Parameters"]["Arguments"]["--summary-path.$"] == (
        f"States.Format('s3://{summary_bucket}/summaries/{{}}.json', $$.Execution.Name)"
    )
    assert spark["Next"] == "ReadSparkSummary" and spark["Catch"][0]["Next"] == "JobTimedOut"
    read = branch["ReadSparkSummary"]
    assert read["Resource"] == "arn:<AWS::Partition>:states:::aws-sdk:s3:getObject"
    assert read["Parameters"] == {
        "Bucket": summary_bucket,
        "Key.$": "States.Format('summaries/{}.json', $$.Execution.Name)",
    }
    assert read["Next"] == "SparkSummary" and read["Catch"][0]["Next"] == "SparkRunOutcome"
    assert branch["SparkSummary"]["Parameters"]["summary.$"] == "States.StringToJson($.summary_object.body)"
    wordcount = branch["RunWordcountJob"]
    assert wordcount["Parameters"]["JobName"] == f"<{dev.logical_id(workflow.glue_jobs['wordcount'])}>"
    assert wordcount["TimeoutSeconds"] == 60 * 60 + 15 * 60
    assert wordcount["Next"] == "ReadWordcountSummary"
    assert branch["SparkRunOutcome"]["End"] is True, "an unreadable summary still ends the job as succeeded"
    assert states["DeleteMessage"]["Parameters"]["ReceiptHandle.$"] == "$.lease.Item.receipt_handle.S"
    assert (
        states["MarkReleased"]["Next"] == "ReleaseJobLockOnFailure" and states["ReleaseMessage"]["Next"] == "JobFailed"
    )


def test_state_machine_is_standard_traced_logged_and_bounded(dev: Synth) -> None:
    [machine] = dev.of_type("AWS::StepFunctions::StateMachine").values()
    props = machine["Properties"]
    assert props["StateMachineType"] == "STANDARD"
    assert props["TracingConfiguration"] == {"Enabled": True}
    assert props["LoggingConfiguration"]["Level"] == "ALL"
    assert definition(dev)["TimeoutSeconds"] == 13 * 3600


# Glue job and buckets


def test_glue_job_is_glue6_with_workers_and_the_pipeline_zip(dev: Synth, prod: Synth) -> None:
    for synth, workers, worker_type, version in ((dev, 2, "G.1X", "6.0"), (prod, 5, "G.2X", "5.1")):
        job = synth.resource(synth.part("Workflow").glue_job)["Properties"]
        assert job["GlueVersion"] == version and job["Command"]["Name"] == "glueetl"
        assert (job["NumberOfWorkers"], job["WorkerType"]) == (workers, worker_type)
        assert job["Timeout"] == 360 and job["MaxRetries"] == 0 and job["JobRunQueuingEnabled"] is True
        assert job["SecurityConfiguration"] == {
            "Ref": synth.logical_id(synth.part("Workflow").node.find_child("GlueSecurity"))
        }
        extra = render_cfn(job["DefaultArguments"]["--extra-py-files"])
        assert extra.startswith("s3://") and extra.endswith(".zip")
        assert render_cfn(job["Command"]["ScriptLocation"]).endswith(".py")


def extra_py_files(synth: Synth, job: Any) -> list[set[str]]:
    """The files of each zip in a Glue job's `--extra-py-files`, in order."""
    props = synth.resource(job)["Properties"]
    zips = []
    for uri in render_cfn(props["DefaultArguments"]["--extra-py-files"]).split(","):
        staged = synth.outdir / f"asset.{uri.rsplit('/', 1)[1].removesuffix('.zip')}"
        zips.append({path.relative_to(staged).as_posix() for path in staged.rglob("*") if path.is_file()})
    return zips


def test_glue_job_pipeline_zip_holds_the_pipeline_package_only(dev: Synth) -> None:
    pipeline, entry = extra_py_files(dev, dev.part("Workflow").glue_job)
    assert {"longjobs/__init__.py", "longjobs/pipeline/job.py", "longjobs/pipeline/glue_entry.py"} <= pipeline
    assert all(name.startswith("longjobs/pipeline/") for name in pipeline - {"longjobs/__init__.py"}), sorted(pipeline)
    assert entry == {"events.py"}, "the type's entry alone, importable as --job-module"


def test_glue_job_per_pyspark_type_runs_the_entry_script_with_the_types_module(dev: Synth, prod: Synth) -> None:
    for synth, spark_workers in ((dev, 2), (prod, 5)):
        jobs = synth.part("Workflow").glue_jobs
        assert sorted(jobs) == ["spark", "textstats", "wordcount"]
        for name, module, workers in (("spark", "events", spark_workers), ("wordcount", "wordcount", 2)):
            props = synth.resource(jobs[name])["Properties"]
            assert render_cfn(props["Command"]["ScriptLocation"]).endswith(".py")
            assert props["DefaultArguments"]["--job-module"] == module
            assert props["DefaultArguments"]["--job-function"] == "run"
            assert props["NumberOfWorkers"] == workers, "wordcount sets its own glue block; spark takes context"
        assert synth.resource(jobs["wordcount"])["Properties"]["Timeout"] == 60
        _, entry = extra_py_files(synth, jobs["wordcount"])
        assert entry == {"wordcount.py"}


def wheels_key(synth: Synth) -> str:
    """The Glue bucket's key of textstats' zip of wheels, as its job names it."""
    props = synth.resource(synth.part("Workflow").glue_jobs["textstats"])["Properties"]
    return render_cfn(props["DefaultArguments"]["--additional-python-modules"]).split("/", 3)[3]


def test_emr_serverless_type_runs_on_its_application_with_the_service_retries_off(prod: Synth) -> None:
    """The prod variant's `wordcount-emr` runs on an application of its own: the step is the optimized
    integration's `.sync` (https://docs.aws.amazon.com/step-functions/latest/dg/connect-emr-serverless.html),
    one attempt per run (RetryPolicy; batch runs' default,
    https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/jobs-resiliency.html), its limit the
    type's and under the 12 h a message may stay hidden, idempotent by the execution's name."""
    [(application_id, application)] = prod.of_type("AWS::EMRServerless::Application").items()
    props = application["Properties"]
    assert (props["Type"], props["ReleaseLabel"], props["Architecture"]) == ("SPARK", "emr-spark-8.0.0", "X86_64")
    assert props["MaximumCapacity"] == {"Cpu": "32 vCPU", "Memory": "256 GB"}
    assert props["AutoStopConfiguration"] == {"Enabled": True, "IdleTimeoutMinutes": 15}
    state = definition(prod)["States"]["RunJob"]["Branches"][0]["States"]["RunWordcountEmrJob"]
    assert state["Resource"] == "arn:<AWS::Partition>:states:::emr-serverless:startJobRun.sync"
    parameters = state["Parameters"]
    assert parameters["ApplicationId"] == f"<{application_id}.ApplicationId>"
    assert parameters["RetryPolicy"] == {"MaxAttempts": 1}
    assert parameters["ExecutionTimeoutMinutes"] == 120 and state["TimeoutSeconds"] == 120 * 60 + 15 * 60
    assert parameters["ClientToken.$"] == parameters["Name.$"] == "$$.Execution.Name"
    submit = parameters["JobDriver"]["SparkSubmit"]
    assert submit["EntryPoint"].endswith(".py") and submit["SparkSubmitParameters"].startswith("--py-files s3://")
    assert submit["EntryPointArguments.$"].startswith(
        "States.Array('--job-module', 'wordcount', '--job-function', 'run', '--params', "
        "States.JsonToString($.job.params), '--summary-path', "
    )
    assert {"ErrorEquals": ["States.HeartbeatTimeout", "States.Timeout"], "Next": "JobTimedOut"} in state["Catch"]
    logs = parameters["ConfigurationOverrides"]["MonitoringConfiguration"]["S3MonitoringConfiguration"]
    assert logs["LogUri"].endswith("/emr-logs/") and logs["EncryptionKeyArn"] == PROD_CONTEXT["kms_key"]
    role = prod.resource(prod.part("Workflow").emr_serverless.role)["Properties"]
    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "emr-serverless.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    assert "wordcount-emr" not in prod.part("Workflow").glue_jobs


def test_emr_serverless_type_may_name_an_existing_application(tmp_path: Path) -> None:
    """`application_arn`: no application is created, and the runs go to that one's id."""
    from tests.infra.conftest import EMR_TYPE

    arn = "arn:aws:emr-serverless:us-east-1:111122223333:/applications/00fabc123def"
    declared = {**EMR_TYPE, "entry": str(REPO_ROOT / "jobs/wordcount.py") + ":run"}
    declared["emr_serverless"] = {"application_arn": arn}
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"job_types": [declared]}))
    synth = synthesize(tmp_path / "out", {"jobs_file": str(jobs)})
    assert synth.of_type("AWS::EMRServerless::Application") == {}
    state = definition(synth)["States"]["RunJob"]["Branches"][0]["States"]["RunWordcountEmrJob"]
    assert state["Parameters"]["ApplicationId"] == "00fabc123def"
    [start] = [
        statement
        for policy in synth.of_type("AWS::IAM::Policy").values()
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "emr-serverless:StartJobRun"
    ]
    assert start["Resource"] == arn


def test_emr_serverless_application_of_another_region_is_refused_naming_it(tmp_path: Path) -> None:
    """The workflow's `emr-serverless:startJobRun` goes to its own region's endpoint, by the application's id
    (https://docs.aws.amazon.com/step-functions/latest/dg/connect-emr-serverless.html): an application of
    another region would fail every run, which synth refuses instead. A token ARN is known at deploy only."""
    import aws_cdk as cdk

    from longjobs.construct import LongJobProcessor
    from longjobs.construct.config import ConfigError
    from tests.infra.conftest import EMR_TYPE

    declared = {**EMR_TYPE, "entry": str(REPO_ROOT / "jobs/wordcount.py") + ":run"}
    elsewhere = "arn:aws:emr-serverless:eu-west-1:111122223333:/applications/00fabc123def"
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Data", env=cdk.Environment(account="111122223333", region="us-east-1"))
    refused = "job type 'wordcount-emr': emr_serverless.application_arn: the application is in region eu-west-1"
    with pytest.raises(ConfigError, match=refused):
        LongJobProcessor(stack, "Jobs", job_types=[{**declared, "emr_serverless": {"application_arn": elsewhere}}])
    here = elsewhere.replace("eu-west-1", "us-east-1")
    LongJobProcessor(stack, "Here", job_types=[{**declared, "emr_serverless": {"application_arn": here}}], nag=False)


def test_glue_job_of_a_package_type_ships_its_folder_and_installs_its_wheels_offline(dev: Synth) -> None:
    """textstats (jobs.json) has `code` and `requirements`: its folder ships whole, its entry imports as a
    module of it, and its pinned package reaches Glue as a zip of wheels installed with `--no-index`, the
    form AWS documents for Glue 5.0 and later ("Using Python libraries with AWS Glue", zip of wheels:
    https://docs.aws.amazon.com/glue/latest/dg/aws-glue-programming-python-libraries.html). Glue installs
    it only under a name ending in `.gluewheels.zip`, so a custom resource copies the asset to that key,
    and the job depends on the copy."""
    workflow = dev.part("Workflow")
    job = workflow.glue_jobs["textstats"]
    args = dev.resource(job)["Properties"]["DefaultArguments"]
    assert (args["--job-module"], args["--job-function"]) == ("textstats.job", "run")
    _, code = extra_py_files(dev, job)
    assert {"textstats/__init__.py", "textstats/job.py", "textstats/words.py", "wordcount.py"} <= code
    assert not any("__pycache__" in name for name in code)
    key = wheels_key(dev)
    assert key.startswith("job-code/textstats/") and key.endswith(".gluewheels.zip")
    assert args["--python-modules-installer-option"] == "--no-index"
    [(copy_id, copy)] = [(k, r) for k, r in dev.of_type("Custom::AWS").items() if "WheelsCopy" in k]
    assert copy_id in dev.resource(job).get("DependsOn", [])
    call = json.loads(render_cfn(copy["Properties"]["Create"]))
    assert (call["service"], call["action"]) == ("S3", "copyObject")
    assert (
        call["parameters"]["Key"] == key
        and call["parameters"]["Bucket"] == f"<{dev.logical_id(workflow.buckets.glue)}>"
    )
    asset = dev.outdir / f"asset.{call['parameters']['CopySource'].rsplit('/', 1)[1].removesuffix('.zip')}"
    assert sorted(path.name for path in (asset / "wheels").iterdir()) == [
        "Unidecode-1.4.0-py3-none-any.whl",
        "requirements.txt",
    ]
    assert (asset / "wheels" / "requirements.txt").read_text() == "Unidecode==1.4.0\n"
    assert call == json.loads(render_cfn(copy["Properties"]["Update"])), "a new zip is copied on update too"


def test_stack_publishes_the_functions_job_catalog_in_the_lease_table_on_each_deploy(dev: Synth) -> None:
    """`longjobs submit` and `top` validate with the catalog the stack publishes: the one the functions
    run, written by a custom resource's PutItem (the only call its policy allows) into the lease table."""
    [published] = [r for k, r in dev.of_type("Custom::AWS").items() if k.startswith("PublishedCatalog")]
    call = json.loads(render_cfn(published["Properties"]["Create"]))
    assert (call["service"], call["action"]) == ("DynamoDB", "putItem")
    assert call == json.loads(render_cfn(published["Properties"]["Update"])), "a changed catalog is written again"
    table = dev.logical_id(dev.part("Leases").table)
    item = call["parameters"]["Item"]
    assert call["parameters"]["TableName"] == f"<{table}>"
    assert (item["pk"], item["published_by"]) == ({"S": CATALOG_KEY}, {"S": f"stack {dev.stack.stack_name}"})
    assert json.loads(item["job_types"]["S"]) == shipped_catalog(dev), "exactly what the functions run"
    variables = dev.resource(dev.part("Functions").receiver)["Properties"]["Environment"]["Variables"]
    uris = {name.lower(): render_cfn(variables[name]) for name in ("CURATED_URI", "QUARANTINE_URI", "RAW_URI")}
    assert json.loads(item["receiver_checks"]["S"]) == {
        "max_renewal_s": 43_200, "cap_safety_s": 60, "max_body_bytes": 65_536, **uris
    }, "the buckets the receiver fills defaults from, as its environment names them"  # fmt: skip
    [policy] = [r for k, r in dev.of_type("AWS::IAM::Policy").items() if k.startswith("PublishedCatalogCustomResource")]
    assert [(s["Action"], render_cfn(s["Resource"])) for s in policy["Properties"]["PolicyDocument"]["Statement"]] == [
        ("dynamodb:PutItem", f"<{table}.Arn>")
    ]


def test_glue_security_configuration_encrypts_logs_and_bookmarks(dev: Synth) -> None:
    [security] = dev.of_type("AWS::Glue::SecurityConfiguration").values()
    config = security["Properties"]["EncryptionConfiguration"]
    assert config["CloudWatchEncryption"]["CloudWatchEncryptionMode"] == "SSE-KMS"
    assert config["JobBookmarksEncryption"]["JobBookmarksEncryptionMode"] == "CSE-KMS"
    for key in dev.of_type("AWS::KMS::Key").values():
        assert key["Properties"]["EnableKeyRotation"] is True


def test_buckets_are_encrypted_private_tls_only_and_logged(dev: Synth) -> None:
    buckets = dev.of_type("AWS::S3::Bucket")
    assert len(buckets) == 5, "raw, curated, quarantine, glue and access logs"
    for logical_id, bucket in buckets.items():
        props = bucket["Properties"]
        assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"] == {
            "SSEAlgorithm": "AES256"
        }
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True,
            "BlockPublicPolicy": True,
            "IgnorePublicAcls": True,
            "RestrictPublicBuckets": True,
        }
        assert bucket["DeletionPolicy"] == "Retain"
        dev.assertions.has_resource_properties(
            "AWS::S3::BucketPolicy",
            {
                "Bucket": {"Ref": logical_id},
                "PolicyDocument": {
                    "Statement": Match.array_with(
                        [Match.object_like({"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}})]
                    )
                },
            },
        )
        if "AccessLogs" not in logical_id:
            assert "DestinationBucketName" in props["LoggingConfiguration"]


def test_buckets_expire_quarantine_and_glue_scratch(dev: Synth, prod: Synth) -> None:
    for synth, days in ((dev, 30), (prod, int(PROD_CONTEXT["quarantine_expiration_days"]))):
        buckets = synth.part("Workflow").buckets
        rules = synth.resource(buckets.quarantine)["Properties"]["LifecycleConfiguration"]["Rules"]
        assert {"ExpirationInDays": days, "Status": "Enabled"} in rules
    glue_rules = dev.resource(dev.part("Workflow").buckets.glue)["Properties"]["LifecycleConfiguration"]
    assert {"ExpirationInDays": 7, "Prefix": "temp/", "Status": "Enabled"} in glue_rules["Rules"]
    assert {"ExpirationInDays": 30, "Prefix": "summaries/", "Status": "Enabled"} in glue_rules["Rules"]
    raw_rules = dev.resource(dev.part("Workflow").buckets.raw)["Properties"]["LifecycleConfiguration"]
    assert not any("ExpirationInDays" in rule for rule in raw_rules["Rules"]), "raw input is kept"


def test_stack_every_bucket_is_versioned_and_its_old_versions_expire(dev: Synth) -> None:
    buckets = dev.part("Workflow").buckets
    for bucket, kept_days in (
        (buckets.raw, 30),  # data: an overwrite can be recovered for a month
        (buckets.curated, 30),
        (buckets.quarantine, 30),  # temporary data: old versions as long as the data (quarantine_expiration_days)
        (buckets.glue, 7),
        (buckets.access_logs, 7),
    ):
        props = dev.resource(bucket)["Properties"]
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}, bucket.node.id
        rules = props["LifecycleConfiguration"]["Rules"]
        assert any(rule.get("NoncurrentVersionExpiration") == {"NoncurrentDays": kept_days} for rule in rules), (
            bucket.node.id,
            rules,
        )


def test_keys_allow_grants_for_aws_services_only(dev: Synth) -> None:
    """AWS Control Tower's CT.KMS.PR.3: each key policy denies kms:CreateGrant to everyone unless the grant
    is for an AWS resource or the caller is an AWS service."""
    keys = dev.of_type("AWS::KMS::Key")
    assert len(keys) == 2, "the Glue key and the alarm topic's key"
    deny = {
        "Effect": "Deny",
        "Principal": {"AWS": "*"},
        "Action": "kms:CreateGrant",
        "Resource": "*",
        "Condition": {"BoolIfExists": {"kms:GrantIsForAWSResource": "false", "aws:PrincipalIsAWSService": "false"}},
    }
    for key in keys.values():
        assert deny in key["Properties"]["KeyPolicy"]["Statement"]
        assert key["Properties"]["EnableKeyRotation"] is True


def test_watcher_has_an_on_failure_destination_and_reserved_concurrency_when_asked(dev: Synth, prod: Synth) -> None:
    # Lambda refuses a reservation that leaves an account under 100 unreserved (a new account's quota is
    # lower): the default stack reserves none.
    functions = dev.part("Functions")
    assert "ReservedConcurrentExecutions" not in dev.resource(functions.watcher)["Properties"]
    assert prod.resource(prod.part("Functions").watcher)["Properties"]["ReservedConcurrentExecutions"] == 5
    watcher = dev.logical_id(functions.watcher)
    [config] = [
        c
        for c in dev.of_type("AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": watcher}
    ]
    failures = dev.logical_id(functions.watcher_failures)
    assert config["Properties"]["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": [failures, "Arn"]}
    assert config["Properties"]["MaximumRetryAttempts"] == 2
    assert dev.resource(functions.watcher_failures)["Properties"]["MessageRetentionPeriod"] == 14 * DAY_S


def test_stack_raw_bucket_notifies_the_jobs_queue_only_when_asked(dev: Synth, prod: Synth) -> None:
    assert not dev.of_type("Custom::S3BucketNotifications")
    [notifications] = prod.of_type("Custom::S3BucketNotifications").values()
    queue = prod.logical_id(prod.part("Queues").queue)
    assert notifications["Properties"]["BucketName"] == {"Ref": prod.logical_id(prod.part("Workflow").buckets.raw)}
    assert notifications["Properties"]["NotificationConfiguration"]["QueueConfigurations"] == [
        {
            "Events": ["s3:ObjectCreated:*"],
            "Filter": {"Key": {"FilterRules": [{"Name": "suffix", "Value": "_SUCCESS"}]}},
            "QueueArn": {"Fn::GetAtt": [queue, "Arn"]},
        }
    ], "only completion markers are sent (the receiver acknowledges any other object anyway)"
    prod.assertions.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": queue}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [Match.object_like({"Effect": "Allow", "Principal": {"Service": "s3.amazonaws.com"}})]
                )
            },
        },
    )


# Monitoring and outputs


def test_alarms_notify_the_topic(dev: Synth, prod: Synth) -> None:
    topic = dev.logical_id(dev.part("Monitoring").topic)
    alarms = dev.of_type("AWS::CloudWatch::Alarm")
    expected = {"DlqArrivals", "OldestMessageAge", "ExtenderErrors", "ExtenderNotRunning", "Lapses"}
    expected |= {"LeasesLostOrCapped", "FailedExecutions"}
    assert {
        name for name in expected for logical_id in alarms if logical_id.startswith(f"Monitoring{name}")
    } == expected
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [{"Ref": topic}]
    assert not dev.of_type("AWS::SNS::Subscription")
    [subscription] = prod.of_type("AWS::SNS::Subscription").values()
    assert subscription["Properties"]["Protocol"] == "email"
    assert subscription["Properties"]["Endpoint"] == PROD_CONTEXT["alarm_email"]
    [topic_props] = [t["Properties"] for t in dev.of_type("AWS::SNS::Topic").values()]
    assert "KmsMasterKeyId" in topic_props


def test_alarms_watch_the_right_metrics(dev: Synth) -> None:
    alarms = {key: value["Properties"] for key, value in dev.of_type("AWS::CloudWatch::Alarm").items()}

    def alarm(name: str) -> dict[str, Any]:
        [props] = [props for key, props in alarms.items() if key.startswith(f"Monitoring{name}")]
        return props

    # Arrivals, not depth: a message left in the DLQ (a cancelled one stays 14 days) must not keep the alarm
    # in ALARM, where the next arrival would notify no one.
    arrivals = alarm("DlqArrivals")
    [expression] = [m["Expression"] for m in arrivals["Metrics"] if "Expression" in m]
    depth = {m["Id"]: m["MetricStat"]["Metric"]["MetricName"] for m in arrivals["Metrics"] if "MetricStat" in m}
    assert (expression, arrivals["Threshold"]) == ("DIFF(FILL(FILL(visible + hidden, REPEAT), 0))", 1)
    assert depth == {
        "visible": "ApproximateNumberOfMessagesVisible",
        "hidden": "ApproximateNumberOfMessagesNotVisible",
    }
    # A built-in `wait` job may hold its message 12 h, longer than the spark type's Glue run (6 h).
    assert alarm("OldestMessageAge")["Threshold"] == MAX_WAIT_S + 3600
    drains = [
        (props["Metrics"][0]["MetricStat"]["Metric"], props["Threshold"])
        for key, props in alarms.items()
        if key.startswith("MonitoringBacklogDrain")
    ]
    limited = sorted(t.name for t in dev.stack.processor.catalog.limited())
    assert limited == ["spark", "textstats", "wordcount"], "the pyspark types, by their Glue jobs' limit"
    job_type = [{"Name": "job_type", "Value": name} for name in limited]
    assert {(metric["MetricName"], threshold, str(metric["Dimensions"][0])) for metric, threshold in drains} == {
        ("BacklogDrainTime", 10 * DAY_S, str(dimension)) for dimension in job_type
    }, "one per limited type: its backlog against the queues' 14 days"
    assert alarm("ExtenderNotRunning")["TreatMissingData"] == "breaching"
    lapses = {m["MetricStat"]["Metric"]["MetricName"] for m in alarm("Lapses")["Metrics"] if "MetricStat" in m}
    assert lapses == {"Lapses", "RedeliveredWhileRunning"}
    lost = {
        m["MetricStat"]["Metric"]["MetricName"] for m in alarm("LeasesLostOrCapped")["Metrics"] if "MetricStat" in m
    }
    assert lost == {"LeasesLost", "LeasesCapped"}
    for m in alarm("Lapses")["Metrics"]:
        if "MetricStat" in m:
            assert m["MetricStat"]["Metric"]["Namespace"] == "LongJobs"
            assert m["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "service", "Value": published_service(dev)}]


Series = Sequence[float | None]
"""A metric's values a minute apart, oldest first; None where CloudWatch has no data point."""
REPEAT = object()


def _diff(series: Series) -> list[float | None]:
    """Metric math's DIFF: each value less the preceding value of the series; nothing before the first."""
    out: list[float | None] = []
    previous = None
    for value in series:
        out.append(None if value is None or previous is None else value - previous)
        previous = value if value is not None else previous
    return out


def _fill(series: Series, filler: object) -> list[float | None]:
    """Metric math's FILL: a number in every gap, or (REPEAT) the last actual value before it, if any."""
    out: list[float | None] = []
    last = None
    for value in series:
        if value is None:
            value = last if filler is REPEAT else float(filler)  # type: ignore[arg-type]
        out.append(value)
        last = value if value is not None else last
    return out


class _Metric:
    def __init__(self, values: Series) -> None:
        self.values = values

    def __add__(self, other: _Metric) -> _Metric:
        # "Missing values in a time series are treated as 0", where either series has one.
        pairs = zip(self.values, other.values, strict=True)
        return _Metric([None if a is None and b is None else (a or 0) + (b or 0) for a, b in pairs])


def evaluate_alarm(props: dict[str, Any], series: dict[str, Series]) -> str:
    """The state an alarm's metric math reaches on `series` (by metric id), as CloudWatch evaluates it:
    the last `EvaluationPeriods` points, ALARM when `DatapointsToAlarm` of them breach, missing ones as
    `notBreaching`."""
    [expression] = [m["Expression"] for m in props["Metrics"] if m.get("ReturnData", True) and "Expression" in m]
    names = {
        "DIFF": lambda m: _Metric(_diff(m.values)),
        "FILL": lambda m, filler: _Metric(_fill(m.values, filler)),
        "REPEAT": REPEAT,
        **{key: _Metric(values) for key, values in series.items()},
    }
    result = eval(expression, {"__builtins__": {}}, names).values  # the template's own expression
    assert props["TreatMissingData"] == "notBreaching"
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    recent = result[-props["EvaluationPeriods"] :]
    breaching = sum(1 for value in recent if value is not None and value >= props["Threshold"])
    return "ALARM" if breaching >= props.get("DatapointsToAlarm", props["EvaluationPeriods"]) else "OK"


def test_monitoring_dlq_arrivals_alarms_on_the_first_message_into_an_idle_dlq(dev: Synth) -> None:
    """SQS publishes a queue's metrics only while it is active (a message in it, or a call, in the last six
    hours). A healthy processor's DLQ is idle, so its first message is the first data point there is: a
    DIFF of the bare depth has nothing to subtract it from and never rises. Nor may a minute SQS has not
    published yet read as a change, nor a message left in the DLQ keep the alarm in ALARM."""
    [props] = [
        alarm["Properties"]
        for key, alarm in dev.of_type("AWS::CloudWatch::Alarm").items()
        if key.startswith("MonitoringDlqArrivals")
    ]
    idle: Series = [None] * 8
    late: Series = [None]
    # asleep for hours, then the receiver sends one message; the newest minute is not published yet
    assert evaluate_alarm(props, {"visible": [*idle, 1.0, *late], "hidden": [*idle, 0.0, *late]}) == "ALARM"
    # a redrive backstop's move while an operator reads another one: the in-flight count rises
    queued: Series = [1.0] * 9
    assert evaluate_alarm(props, {"visible": [*queued, *late], "hidden": [*([0.0] * 8), 1.0, *late]}) == "ALARM"
    # two messages left there, the newest minute late: no arrival
    left: Series = [2.0] * 9
    assert evaluate_alarm(props, {"visible": [*left, *late], "hidden": [*([0.0] * 9), *late]}) == "OK"
    # the arrival a few minutes back: OK again, so the next one notifies
    earlier: Series = [*([0.0] * 4), *([1.0] * 6)]
    assert evaluate_alarm(props, {"visible": earlier, "hidden": [0.0] * len(earlier)}) == "OK"
    # asleep throughout: nothing
    asleep: Series = [None] * 10
    assert evaluate_alarm(props, {"visible": asleep, "hidden": asleep}) == "OK"


def test_monitoring_oldest_message_age_description_matches_what_sqs_counts(dev: Synth) -> None:
    """SQS leaves a message received three times or more out of `ApproximateAgeOfOldestMessage`, so the
    alarm cannot tell of a message that keeps failing (docs/deploy.md's runbook says so): its description,
    the one line in the notification, must not promise it."""
    [props] = [
        alarm["Properties"]
        for key, alarm in dev.of_type("AWS::CloudWatch::Alarm").items()
        if key.startswith("MonitoringOldestMessageAge")
    ]
    description = props["AlarmDescription"]
    assert "keeps failing" not in description, description
    assert "three times" in description, description


def published_service(synth: Synth) -> str:
    """The `service` the stack's functions publish their metrics under (Powertools' service name)."""
    functions = synth.part("Functions")
    [service] = {
        synth.resource(f)["Properties"]["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"]
        for f in (functions.receiver, functions.extender, functions.watcher)
    }
    return str(service)


def read_services(synth: Synth) -> set[str]:
    """Every `service` dimension the stack's alarms and dashboard read."""
    read: set[str] = set()
    for alarm in synth.of_type("AWS::CloudWatch::Alarm").values():
        for metric in alarm["Properties"].get("Metrics", []):
            dimensions = metric.get("MetricStat", {}).get("Metric", {}).get("Dimensions", [])
            read |= {d["Value"] for d in dimensions if d["Name"] == "service"}
        read |= {d["Value"] for d in alarm["Properties"].get("Dimensions", []) if d["Name"] == "service"}
    [dashboard] = synth.of_type("AWS::CloudWatch::Dashboard").values()
    for widget in json.loads(render_cfn(dashboard["Properties"]["DashboardBody"]))["widgets"]:
        for metric in widget["properties"].get("metrics", []):
            read |= {metric[i + 1] for i, part in enumerate(metric[:-1]) if part == "service"}
    return read


def test_stack_metrics_service_is_each_stacks_own_and_read_by_its_alarms(dev: Synth, prod: Synth) -> None:
    """Two stacks in one account and region (dev and prod) publish their metrics under their own `service`
    dimension, so one's lapses never page the other's topic. Every alarm and graph reads its stack's, and
    the `MetricsService` output names it for `longjobs status` and `top`."""
    services = [(synth, published_service(synth)) for synth in (dev, prod)]
    assert services[0][1] != services[1][1], [service for _, service in services]
    for synth, service in services:
        assert read_services(synth) == {service}, (service, read_services(synth))
        assert synth.template["Outputs"]["MetricsService"]["Value"] == service


def test_dashboard_is_named_for_the_stage_and_shows_the_path(dev: Synth, prod: Synth) -> None:
    for synth, name in ((dev, "LongJobs-dev"), (prod, "LongJobs-prod")):
        [dashboard] = synth.of_type("AWS::CloudWatch::Dashboard").values()
        assert dashboard["Properties"]["DashboardName"] == name
    [dashboard] = dev.of_type("AWS::CloudWatch::Dashboard").values()
    body = render_cfn(dashboard["Properties"]["DashboardBody"])
    for title in (
        "Jobs queue",
        "Dead-letter queue",
        "Leases",
        "Renewal failures by class",
        "Executions",
        "Glue job runs: spark",
        "Glue job runs: wordcount",
    ):
        assert f'"title":"{title}"' in body
    for metric in ("Renewals", "Lapses", "LeasesCapped", "LeasesLost", "JobsStarted", "ExecutionsSucceeded"):
        assert f'"{metric}"' in body


def test_dashboard_shows_what_each_types_ended_attempts_cost(prod: Synth) -> None:
    """The watcher's AttemptCost, summed per job type, for every type that runs in the workflow (the
    EMR Serverless one too); inline types never reach it."""
    [dashboard] = prod.of_type("AWS::CloudWatch::Dashboard").values()
    widgets = json.loads(render_cfn(dashboard["Properties"]["DashboardBody"]))["widgets"]
    [cost] = [w for w in widgets if w["properties"].get("title") == "Cost of ended attempts (USD, list price)"]
    left = [m for m in cost["properties"]["metrics"] if "AttemptCost" in m]
    types = {m[m.index("job_type") + 1] for m in left}
    assert {"spark", "wait", "wordcount", "textstats", "wordcount-emr"} <= types and "echo" not in types
    assert all(m[-1]["stat"] == "Sum" for m in left)


def test_outputs_name_every_resource_an_operator_needs(dev: Synth) -> None:
    outputs = dev.template["Outputs"]
    assert {
        "QueueUrl",
        "DeadLetterQueueUrl",
        "LeaseTableName",
        "StateMachineArn",
        "DashboardName",
        "RawBucketName",
        "CuratedBucketName",
        "QuarantineBucketName",
        "GlueBucketName",
        "GlueJobName",
        "AlarmTopicArn",
    } <= set(outputs)
    assert outputs["QueueUrl"]["Value"] == {"Ref": dev.logical_id(dev.part("Queues").queue)}
    assert outputs["DashboardName"]["Value"] == "LongJobs-dev"


def test_stack_every_alarm_has_a_runbook_entry(dev: Synth) -> None:
    """docs/deploy.md has a heading per alarm the stack makes, saying what to do when it fires."""
    page = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    runbook = page[page.index("## When an alarm fires") :].split("\n## ", 1)[0]
    entries = set(re.findall(r"^### `(\w+?)(?:<N>)?`$", runbook, re.M))
    made = {
        re.sub(r"\d+$", "", logical_id.removeprefix("Monitoring")[: -len("0123ABCD")])  # CDK's hash, an index
        for logical_id in dev.of_type("AWS::CloudWatch::Alarm")
    }
    assert len(made) >= 7 and made <= entries, made - entries


def test_stack_extender_errors_runbook_names_the_extenders_log_group(dev: Synth, cmk: Synth) -> None:
    """The `ExtenderErrors` entry of docs/deploy.md sends the operator to the extender's log group by a
    name pattern: it matches the name CloudFormation gives the group (`<stack>-<logical id>-<suffix>`, the
    template naming none), and the name `kms_key` gives it."""
    page = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    entry = page[page.index("### `ExtenderErrors`") :].split("\n### ", 1)[0]
    patterns = [
        re.compile(re.sub(r"<[^>]+>|\\\.\\\.\\\.", ".+", re.escape(text)))
        for text in re.findall(r"`([^`]*[Ee]xtender[^`]*)`", entry)
    ]
    function = dev.resource(dev.part("Functions").extender)
    extender = function["Properties"]["LoggingConfig"]["LogGroup"]["Ref"]
    assert "LogGroupName" not in dev.resources[extender]["Properties"]
    generated = f"{dev.stack.stack_name}-{extender}-1A2B3C4D5E6F"
    named = cmk.resources[extender]["Properties"]["LogGroupName"]
    for name in (generated, named):
        assert any(pattern.fullmatch(name) for pattern in patterns), (name, [p.pattern for p in patterns])


def test_stack_dashboard_list_of_deploy_page_describes_every_widget(dev: Synth) -> None:
    """docs/deploy.md's "Where to watch it" describes each widget of the dashboard by what it shows."""
    page = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    listed = page[page.index("- **CloudWatch dashboard") : page.index("- **Alarms**")]
    described = {
        "Jobs queue": "queue depth, in flight (leased) and the oldest message's age",
        "Dead-letter queue": "the DLQ's depth",
        "Leases": "renewals, completed and released leases and the time left at renewal",
        "Renewal failures by class": "renewal failures by class",
        "Lapses, capped and lost leases, stopped executions": "lapses, capped and lost leases",
        "Jobs received": "jobs received by outcome",
        "Executions": "executions started, succeeded, failed, timed out and aborted",
        "Glue job runs": "Glue task counts and elapsed time",
        "Function errors and throttles": "the functions' errors and throttles",
        "Cost of ended attempts (USD, list price)": "the cost of each type's ended attempts",
        "Admission": "per limited type, its slots",
        "Alarms": "An alarm status panel",
    }
    [dashboard] = dev.of_type("AWS::CloudWatch::Dashboard").values()
    widgets = json.loads(render_cfn(dashboard["Properties"]["DashboardBody"]))["widgets"]
    titles = {re.sub(r": .*$", "", w["properties"]["title"]) for w in widgets}
    assert titles == set(described), titles ^ set(described)
    text = " ".join(listed.split())
    assert [phrase for phrase in described.values() if phrase not in text] == []


# SnapStart


def test_snapstart_functions_are_invoked_through_their_published_alias(cmk: Synth, dev: Synth) -> None:
    """SnapStart applies to published versions only, never to `$LATEST`
    (https://docs.aws.amazon.com/lambda/latest/dg/snapstart.html): with `snapstart`, each function is
    published, and the event source mapping, the schedule, the status-change rule and the asynchronous
    invocation settings all name its alias `live`."""
    functions = cmk.part("Functions")
    resources = cmk.template["Resources"]
    aliases = {
        name: resource["Properties"] for name, resource in resources.items() if resource["Type"] == "AWS::Lambda::Alias"
    }
    alias_of = {}
    for fn in (functions.receiver, functions.extender, functions.watcher):
        props = cmk.resource(fn)["Properties"]
        assert props["SnapStart"] == {"ApplyOn": "PublishedVersions"}
        logical_id = cmk.stack.resolve(cmk.stack.get_logical_id(fn.node.default_child))
        [alias] = [name for name, a in aliases.items() if a["FunctionName"] == {"Ref": logical_id}]
        assert aliases[alias]["Name"] == "live"
        alias_of[fn.node.id] = alias

    def names_alias(value: Any, function: str) -> bool:
        return {"Ref": alias_of[function]} == value or (
            json.dumps({"Ref": alias_of[function]}) in json.dumps(value) and ":live" in json.dumps(value)
        )

    [mapping] = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert names_alias(mapping["FunctionName"], "Receiver"), mapping["FunctionName"]
    [schedule] = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Scheduler::Schedule"]
    assert names_alias(schedule["Target"]["Arn"], "Extender"), schedule["Target"]
    [rule] = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    [target] = rule["Targets"]
    assert names_alias(target["Arn"], "Watcher"), target
    invoke_configs = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventInvokeConfig"]
    qualifiers = [json.dumps(config["Qualifier"]) for config in invoke_configs]
    assert len(qualifiers) == 2 and all("live" in qualifier for qualifier in qualifiers), qualifiers

    assert not any(r["Type"] == "AWS::Lambda::Alias" for r in dev.template["Resources"].values())
    assert "SnapStart" not in dev.resource(dev.part("Functions").receiver)["Properties"]


def test_snapstart_is_refused_where_lambda_does_not_offer_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import aws_cdk as cdk

    from longjobs.construct import LongJobProcessor
    from longjobs.construct.config import ConfigError

    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Taipei", env=cdk.Environment(account="123456789012", region="ap-east-2"))
    with pytest.raises(ConfigError, match="snapstart: Lambda SnapStart is not offered in ap-east-2"):
        LongJobProcessor(stack, "Jobs", infra={"snapstart": True})
