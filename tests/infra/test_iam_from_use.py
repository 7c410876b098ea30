"""IAM derived from use (issue 22): every AWS call a role's code makes is granted to that role, and every
grant of the role is either used by such a call or listed, with its reason, in `EXPLAINED_GRANTS`.

The calls come from two places:
- the simulation's traces (`longjobs.sim`): the receiver, extender and watcher as they run, and the
  workflow's SDK tasks as the interpreter runs the definition the construct renders, over a few seeds of
  every profile (`SEEDS`; each seed takes well under a second);
- the deployed state machine's definition in the synthesized template: every Task's integration (the
  Glue run and the summary read, which the simulation stands in for with its token queue).

The grants come from the synthesized dev stack (`tests.infra.conftest.dev`): the AWS::IAM::Policy
resources attached to each function's role and to the state machine's role, their inline policies and
managed policies. Both sides are compared as concrete ARNs (the template's intrinsics resolved with the
names CloudFormation would give), with IAM's wildcards, so a grant on the wrong queue counts as missing.

A call not granted is a deploy-time failure in AWS (AccessDenied); a grant neither used nor explained is
more privilege than the code needs. Operations map to IAM actions as the service authorization
reference says (`OPERATION_ACTIONS`, with the AWS page each follows).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from tests.infra.conftest import Synth

ACCOUNT = "123456789012"
REGION = "us-east-1"
PARTITION = "aws"

SEEDS: tuple[tuple[str, int], ...] = (
    ("standard", 7),  # a job lock taken again (a ConditionCheck), a message sent back to wait for its job id
    ("standard", 9),
    ("fifo", 9),
    ("fifo", 32),  # the extender stops an execution whose lease can no longer be held (also fifo 62)
    ("fifo", 62),
    ("admission", 23),
    ("admission", 38),  # unparking deletes from a waiting queue, dead-letters; the receiver admits in place
    ("admission", 28),  # unparking, dead-lettering (also 10)
    ("admission", 10),
    ("admission", 54),  # the receiver hides a message it received from a waiting queue (also 49)
    ("admission", 49),
    ("mixed", 0),
)
"""(profile, seed): every profile, and at least two seeds for each call, chosen by a survey of 40 seeds per
profile for the cheapest (about 3 s together); the admission passes' ConditionCheck is explained, not
reached (`ADMISSION_CONDITION_CHECK`). A change of the engine may move
what a seed reaches: a grant then reported unused is reached again by another seed (survey with
`python -m offline sim --seed N --profile P --trace t.jsonl`), never by listing a call the code makes.
They were surveyed before S3 notifications joined the workload, and run without them (`--no-s3`), so
each reaches what it was chosen for; `S3_SEEDS` adds the fan-out of a notification's markers."""

S3_SEEDS: tuple[tuple[str, int], ...] = (("standard", 9),)
"""(profile, seed) run with their S3 notifications: the receiver's fan-out (its markers' conditional
creates and reads, the job messages it sends, their notes and claims)."""

ACTOR_ROLES = {"receiver": "receiver", "extender": "extender", "watcher": "watcher", "workflow": "state_machine"}
"""Which role each actor of the simulation runs as."""
ACTORS_WITHOUT_A_ROLE = {
    "spark": "the offline Spark worker behind the token queue: in the stack a Glue run, with the Glue role",
    "operator": "`longjobs cancel`, run by a person with the operator's own IAM (docs/operate.md's IAM table)",
}
"""Actors of the simulation whose calls no role of the processor makes, with the reason."""

# -- operations to IAM actions --------------------------------------------------------------------------------

DYNAMODB_TRANSACTION_ACTIONS = {
    "Put": "dynamodb:PutItem",
    "Update": "dynamodb:UpdateItem",
    "Delete": "dynamodb:DeleteItem",
    "ConditionCheck": "dynamodb:ConditionCheckItem",
    "Get": "dynamodb:GetItem",
}
"""A transaction needs the item-level action of each of its actions, not an action of its own: "Permissions
for Put, Update, Delete, and Get actions are governed by the permissions used for the underlying PutItem,
UpdateItem, DeleteItem, and GetItem operations. For the ConditionCheck action, you can use the
dynamodb:ConditionCheckItem permission"
(https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/transaction-apis-iam.html)."""

OPERATION_ACTIONS: dict[str, str] = {
    # SQS: "setting permissions for SendMessage, DeleteMessage, or ChangeMessageVisibility sets permissions
    # for the corresponding batch versions of the actions"
    # (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-batch-api.html;
    # the actions: https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-api-permissions-reference.html)
    "sqs.send_message": "sqs:SendMessage",
    "sqs.send_message_batch": "sqs:SendMessage",
    "sqs.receive_message": "sqs:ReceiveMessage",
    "sqs.delete_message": "sqs:DeleteMessage",
    "sqs.delete_message_batch": "sqs:DeleteMessage",
    "sqs.change_message_visibility": "sqs:ChangeMessageVisibility",
    "sqs.change_message_visibility_batch": "sqs:ChangeMessageVisibility",
    "sqs.get_queue_attributes": "sqs:GetQueueAttributes",
    # DynamoDB: one action per operation, of the same name, on the table or the queried index
    # (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazondynamodb.html)
    "dynamodb.get_item": "dynamodb:GetItem",
    "dynamodb.put_item": "dynamodb:PutItem",
    "dynamodb.update_item": "dynamodb:UpdateItem",
    "dynamodb.delete_item": "dynamodb:DeleteItem",
    "dynamodb.query": "dynamodb:Query",
    "dynamodb.batch_get_item": "dynamodb:BatchGetItem",
    "dynamodb.batch_write_item": "dynamodb:BatchWriteItem",
    # Step Functions: StartExecution and ListExecutions on the state machine, the others on an execution
    # (https://docs.aws.amazon.com/service-authorization/latest/reference/list_awsstepfunctions.html)
    "stepfunctions.start_execution": "states:StartExecution",
    "stepfunctions.list_executions": "states:ListExecutions",
    "stepfunctions.describe_execution": "states:DescribeExecution",
    "stepfunctions.stop_execution": "states:StopExecution",
    "stepfunctions.get_execution_history": "states:GetExecutionHistory",
    # EMR Serverless: ListJobRuns on the application, GetJobRun and CancelJobRun on the run
    # (https://docs.aws.amazon.com/service-authorization/latest/reference/list_amazonemrserverless.html)
    "emr-serverless.list_job_runs": "emr-serverless:ListJobRuns",
    "emr-serverless.get_job_run": "emr-serverless:GetJobRun",
    "emr-serverless.cancel_job_run": "emr-serverless:CancelJobRun",
}
"""A boto3 operation (`service.operation`) to the IAM action it needs; transactions are split per action
(`DYNAMODB_TRANSACTION_ACTIONS`)."""

TASK_ACTIONS: dict[str, str] = {
    "arn:aws:states:::dynamodb:getItem": "dynamodb:GetItem",
    "arn:aws:states:::dynamodb:updateItem": "dynamodb:UpdateItem",
    "arn:aws:states:::dynamodb:putItem": "dynamodb:PutItem",
    "arn:aws:states:::aws-sdk:sqs:deleteMessage": "sqs:DeleteMessage",
    "arn:aws:states:::aws-sdk:sqs:changeMessageVisibility": "sqs:ChangeMessageVisibility",
    "arn:aws:states:::aws-sdk:s3:getObject": "s3:GetObject",
    "arn:aws:states:::glue:startJobRun.sync": "glue:StartJobRun",
    "arn:aws:states:::emr-serverless:startJobRun.sync": "emr-serverless:StartJobRun",
}
"""A Task's `Resource` in the deployed definition to the action the state machine's role calls; what
Step Functions itself calls for a `.sync` integration (polling the run, stopping it) is in
`EXPLAINED_GRANTS` (https://docs.aws.amazon.com/step-functions/latest/dg/connect-glue.html)."""

# -- the explained grants ---------------------------------------------------------------------------------------

ESM = (
    "Lambda's event source mapping polls the jobs queue with the receiver's role and deletes the records "
    "it reports done: sqs:ReceiveMessage, sqs:DeleteMessage, sqs:GetQueueAttributes "
    "(https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html#events-sqs-permissions)"
)
LOGS = (
    "Lambda writes the function's logs (and its EMF metrics, so no cloudwatch:PutMetricData) to its log "
    "group with the function's role "
    "(https://docs.aws.amazon.com/lambda/latest/dg/monitoring-cloudwatchlogs.html#monitoring-cloudwatchlogs-prereqs)"
)
XRAY = (
    "active tracing: Lambda sends the trace segments with the function's role; X-Ray's actions take no "
    "resource (https://docs.aws.amazon.com/lambda/latest/dg/services-xray.html#services-xray-permissions)"
)
COLD_START_VT = (
    "the handler's cold start reads the queue's VisibilityTimeout when the remaining policy has no "
    "visibility_timeout_s (`longjobs.engine.policies.resolve_visibility_timeout`); the simulation builds "
    "the services, not the handlers"
)
UNPARK_WAIT_FOR_JOB = (
    "an admission pass handles an unparked message as the receiver does: when its job id is held it is "
    "sent back to the jobs queue to wait (`delivery.attempt.wait_for_job`; issue 22 defect 5). The "
    "simulation's admission workload has no two messages of one job id, so no seed reaches it"
)
UNPARK_PARK_AGAIN = (
    "an admission pass handles an unparked message as the receiver does, so it may park it again "
    "(`admission.parking`): not reached by the seeds"
)
RECEIVER_UNPARK = (
    "a new arrival that finds a slot free while messages are parked unparks them first "
    "(`admission.line.claim`): it receives them, hides one that must wait in its waiting queue and deletes "
    "those it handled (`admission.parking.unpark`, the extender's code, whose seeds reach each call); "
    "tests/functional/test_admission.py::test_admission_new_arrival_takes_no_freed_slot_ahead_of_parked_messages "
    "walks it. The seeds no longer do since a batch of arrivals for a full type reads its slots once"
)
WATCHER_UNPARKED_WAITS = (
    "the watcher's pass asks no waiting queue's depth, but a message it unparks into a free slot is "
    "handled as the receiver does: when another took the slot meanwhile it waits, and waiting reads the "
    "type's counts (`admission.readings.view_of`: GetQueueAttributes of the waiting queue); the extender's "
    "seeds reach that call, the watcher's (which unpark only into free slots) do not"
)
RECONCILE_COMPLETE = (
    "reconciliation completes a SUCCEEDED execution whose workflow did not settle its message: it deletes "
    "the message (`settle.complete`, tests/functional/test_reconcile.py); not reached by the seeds"
)
ADMISSION_CONDITION_CHECK = (
    "an admission pass (`admission.admit.admit_all`, the extender's and the watcher's) handles an unparked "
    "message as the receiver does (`receive`), whose resumed attempt takes its holds again in a transaction "
    "with a ConditionCheck on its lease (`LeaseStore.unchanged_request`): the seeds reach it through the "
    "receiver, and through the admission passes only on some seeds"
)
DESTINATION = (
    "the watcher's on-failure destination: Lambda sends a failed event's record with the function's role "
    "(sqs:SendMessage; https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-retain-records.html); "
    "CDK's grantSendMessages adds sqs:GetQueueAttributes and sqs:GetQueueUrl"
)
CDK_CONSUME = (
    "CDK's SqsEventSource grants grantConsumeMessages, which adds sqs:GetQueueUrl to what the mapping uses; "
    "a read of the queue's own URL"
)
GLUE_JOB_RUNS = (
    "a job's next attempt asks the type's Glue job whether the previous attempt's run ended, and stops one "
    "still running (`longjobs.engine.runs`); the simulation runs no Glue (its token step stands in), and "
    "tests/functional/test_job_runs.py holds these calls to the service's model"
)
GLUE_SYNC = (
    "the `.sync` Glue integration: Step Functions polls the run and stops it when the state is stopped "
    "(glue:GetJobRun, glue:GetJobRuns, glue:BatchStopJobRun; "
    "https://docs.aws.amazon.com/step-functions/latest/dg/connect-glue.html#glue-iam)"
)
SFN_LOGS = (
    "the state machine's logging to CloudWatch Logs: Step Functions manages the log delivery with the "
    "role; these actions take no resource (https://docs.aws.amazon.com/step-functions/latest/dg/cw-logs.html)"
)
SFN_XRAY = (
    "the state machine's X-Ray tracing: Step Functions sends the segments and reads the sampling rules "
    "with the role (https://docs.aws.amazon.com/step-functions/latest/dg/xray-iam.html)"
)


@dataclass(frozen=True)
class ExplainedGrant:
    """A grant no recorded call uses, kept for `reason`. `resource` names a resource of the stack
    (`stack_resources`), `*` for none."""

    role: str
    action: str
    resource: str
    reason: str


def _explain(role: str, resource: str, reason: str, *actions: str) -> list[ExplainedGrant]:
    return [ExplainedGrant(role, action, resource, reason) for action in actions]


EXPLAINED_GRANTS: tuple[ExplainedGrant, ...] = (
    *_explain("receiver", "jobs queue", ESM, "sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"),
    *_explain("receiver", "jobs queue", CDK_CONSUME, "sqs:GetQueueUrl"),
    *_explain("extender", "jobs queue", COLD_START_VT, "sqs:GetQueueAttributes"),
    *_explain("watcher", "jobs queue", COLD_START_VT, "sqs:GetQueueAttributes"),
    *_explain("extender", "jobs queue", UNPARK_WAIT_FOR_JOB, "sqs:SendMessage"),
    *_explain("watcher", "jobs queue", UNPARK_WAIT_FOR_JOB, "sqs:SendMessage"),
    *_explain("extender", "waiting queues", UNPARK_PARK_AGAIN, "sqs:SendMessage"),
    *_explain("watcher", "waiting queues", UNPARK_PARK_AGAIN, "sqs:SendMessage"),
    *_explain("extender", "jobs queue", RECONCILE_COMPLETE, "sqs:DeleteMessage"),
    *_explain(
        "receiver",
        "waiting queues",
        RECEIVER_UNPARK,
        "sqs:ReceiveMessage",
        "sqs:ChangeMessageVisibility",
        "sqs:DeleteMessage",
    ),
    *_explain("watcher", "waiting queues", WATCHER_UNPARKED_WAITS, "sqs:GetQueueAttributes"),
    *_explain("extender", "lease table", ADMISSION_CONDITION_CHECK, "dynamodb:ConditionCheckItem"),
    *_explain("watcher", "lease table", ADMISSION_CONDITION_CHECK, "dynamodb:ConditionCheckItem"),
    *_explain(
        "watcher", "watcher failures queue", DESTINATION, "sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"
    ),
    *(
        explained
        for function in ("receiver", "extender", "watcher")
        for explained in (
            *_explain(function, f"{function} log group", LOGS, "logs:CreateLogStream", "logs:PutLogEvents"),
            *_explain(function, "*", XRAY, "xray:PutTraceSegments", "xray:PutTelemetryRecords"),
        )
    ),
    *(
        explained
        for function in ("receiver", "extender", "watcher")
        for explained in _explain(function, "glue jobs", GLUE_JOB_RUNS, "glue:GetJobRuns", "glue:BatchStopJobRun")
    ),
    *_explain("state_machine", "glue jobs", GLUE_SYNC, "glue:GetJobRun", "glue:GetJobRuns", "glue:BatchStopJobRun"),
    *_explain(
        "state_machine",
        "*",
        SFN_LOGS,
        "logs:CreateLogDelivery",
        "logs:DeleteLogDelivery",
        "logs:DescribeLogGroups",
        "logs:DescribeResourcePolicies",
        "logs:GetLogDelivery",
        "logs:ListLogDeliveries",
        "logs:PutResourcePolicy",
        "logs:UpdateLogDelivery",
    ),
    *_explain(
        "state_machine",
        "*",
        SFN_XRAY,
        "xray:GetSamplingRules",
        "xray:GetSamplingTargets",
        "xray:PutTelemetryRecords",
        "xray:PutTraceSegments",
    ),
)
"""Every grant of the dev stack that no recorded call uses, with its reason: what a service calls on the
role's behalf, what CDK's grants add, and the code paths the seeds do not reach."""

# -- the template, resolved ---------------------------------------------------------------------------------------


class Template:
    """A synthesized template whose intrinsics resolve to the concrete names and ARNs CloudFormation would
    give a stack in `ACCOUNT` and `REGION` (a resource without an explicit name is named by its logical id)."""

    def __init__(self, template: Mapping[str, Any]) -> None:
        self.resources: dict[str, Any] = dict(template["Resources"])

    def resolve(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, dict) and len(value) == 1:
            [(function, argument)] = value.items()
            if function == "Ref":
                return self._ref(argument)
            if function == "Fn::GetAtt":
                logical_id, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
                return self._attribute(logical_id, attribute)
            if function == "Fn::Join":
                separator, parts = argument
                return str(separator).join(self.resolve(part) for part in parts)
            if function == "Fn::Sub" and isinstance(argument, str):  # CDK's asset URLs name pseudo parameters
                return re.sub(r"\$\{([^}]+)\}", lambda match: self._ref(match.group(1)), argument)
        raise ValueError(f"cannot resolve {value!r}")

    def _name(self, logical_id: str) -> str:
        resource = self.resources[logical_id]
        properties = resource.get("Properties", {})
        for key in ("QueueName", "TableName", "StateMachineName", "LogGroupName", "Name", "BucketName"):
            if key in properties:
                return self.resolve(properties[key])
        if resource["Type"] == "AWS::SQS::Queue" and properties.get("FifoQueue"):
            return f"{logical_id}.fifo"
        return logical_id.lower() if resource["Type"] == "AWS::S3::Bucket" else logical_id

    def _ref(self, name: str) -> str:
        pseudo = {"AWS::Partition": PARTITION, "AWS::Region": REGION, "AWS::AccountId": ACCOUNT}
        if name in pseudo:
            return pseudo[name]
        kind = self.resources[name]["Type"]
        if kind == "AWS::SQS::Queue":
            return f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{self._name(name)}"
        if kind == "AWS::StepFunctions::StateMachine":
            return self._attribute(name, "Arn")
        if kind in ("AWS::DynamoDB::Table", "AWS::Glue::Job", "AWS::S3::Bucket", "AWS::Logs::LogGroup"):
            return self._name(name)
        if kind in ("AWS::KMS::Key", "AWS::IAM::Role"):
            return name
        raise ValueError(f"Ref of a {kind} ({name}) is not modelled")

    def _attribute(self, logical_id: str, attribute: str) -> str:
        kind, name = self.resources[logical_id]["Type"], self._name(logical_id)
        arns = {
            "AWS::SQS::Queue": f"arn:{PARTITION}:sqs:{REGION}:{ACCOUNT}:{name}",
            "AWS::DynamoDB::Table": f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{name}",
            "AWS::StepFunctions::StateMachine": f"arn:{PARTITION}:states:{REGION}:{ACCOUNT}:stateMachine:{name}",
            "AWS::Logs::LogGroup": f"arn:{PARTITION}:logs:{REGION}:{ACCOUNT}:log-group:{name}:*",
            "AWS::S3::Bucket": f"arn:{PARTITION}:s3:::{name}",
            "AWS::KMS::Key": f"arn:{PARTITION}:kms:{REGION}:{ACCOUNT}:key/{logical_id}",
            "AWS::Lambda::Function": f"arn:{PARTITION}:lambda:{REGION}:{ACCOUNT}:function:{name}",
            "AWS::IAM::Role": f"arn:{PARTITION}:iam::{ACCOUNT}:role/{name}",
            "AWS::EMRServerless::Application": f"arn:{PARTITION}:emr-serverless:{REGION}:{ACCOUNT}:/applications/"
            + logical_id.lower(),
        }
        if attribute == "Arn" and kind in arns:
            return arns[kind]
        if attribute == "ApplicationId" and kind == "AWS::EMRServerless::Application":
            return logical_id.lower()
        if attribute in ("Name", "QueueName"):
            return name
        raise ValueError(f"attribute {attribute} of a {kind} ({logical_id}) is not modelled")


# -- grants, calls and their comparison ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """One action on one resource pattern (IAM wildcards), as a role's policy allows it."""

    action: str
    resource: str


@dataclass(frozen=True)
class Call:
    """One IAM action a role needs on one concrete resource (None: the resource is known only at run time,
    checked by action), and where it was seen."""

    action: str
    resource: str | None
    source: str


def role_grants(template: Template, role_id: str) -> set[Grant]:
    """Every (action, resource) the role's policies allow: the AWS::IAM::Policy resources naming the role,
    its inline policies, its managed policies (named as `managed:<arn>`, which nothing uses)."""
    role = template.resources[role_id]["Properties"]
    documents = [policy["PolicyDocument"] for policy in role.get("Policies", [])]
    documents += [
        resource["Properties"]["PolicyDocument"]
        for resource in template.resources.values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in resource["Properties"].get("Roles", [])
    ]
    grants = {Grant("managed", template.resolve(arn)) for arn in role.get("ManagedPolicyArns", [])}
    for document in documents:
        for statement in document["Statement"]:
            assert statement["Effect"] == "Allow", f"{role_id}: a Deny is not modelled: {statement}"
            assert "NotAction" not in statement and "NotResource" not in statement, statement
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            resources = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            grants |= {Grant(action, template.resolve(resource)) for action in actions for resource in resources}
    return grants


def allows(grant: Grant, action: str, resource: str | None) -> bool:
    """IAM's matching: actions case-insensitively, resources case-sensitively, both with `*` and `?`."""
    if not fnmatch.fnmatchcase(action.lower(), grant.action.lower()):
        return False
    return resource is None or fnmatch.fnmatchcase(resource, grant.resource)


@dataclass
class Comparison:
    ungranted: list[Call]
    unexplained: list[Grant]
    stale_explanations: list[ExplainedGrant]


def compare(
    calls: Iterable[Call],
    grants: set[Grant],
    explained: Iterable[ExplainedGrant],
    resources: Mapping[str, set[str]],
) -> Comparison:
    """Calls no grant allows; grants no call uses and no explanation names; explanations of no grant.
    `resources` resolves an explanation's resource name to its ARNs."""
    calls = list(calls)
    ungranted = [call for call in calls if not any(allows(grant, call.action, call.resource) for grant in grants)]
    explained = list(explained)

    def explains(entry: ExplainedGrant, grant: Grant) -> bool:
        return entry.action.lower() == grant.action.lower() and grant.resource in resources[entry.resource]

    unexplained = [
        grant
        for grant in sorted(grants, key=lambda g: (g.action.lower(), g.resource))
        if not any(allows(grant, call.action, call.resource) for call in calls)
        and not any(explains(entry, grant) for entry in explained)
    ]
    stale = [entry for entry in explained if not any(explains(entry, grant) for grant in grants)]
    return Comparison(ungranted, unexplained, stale)


# -- what the stack holds -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackNames:
    """The dev stack's resources the calls and explanations name, as concrete ARNs."""

    jobs_queue: str
    dlq: str
    waiting_queues: tuple[str, ...]
    table: str
    state_machine: str
    state_machine_name: str
    roles: dict[str, str]
    """role name -> logical id"""
    resources: dict[str, set[str]]
    """explanation resource name -> ARNs"""
    emr_applications: tuple[str, ...] = ()
    """The EMR Serverless applications' ARNs (the simulation's one application stands for each)."""


def stack_names(synth: Synth) -> StackNames:
    template = Template(synth.template)
    stack = synth.stack

    def arn(token: str) -> str:
        return template.resolve(stack.resolve(token))

    queues, functions, workflow = synth.part("Queues"), synth.part("Functions"), synth.part("Workflow")
    machine = workflow.state_machine
    waiting = tuple(arn(queue.queue_arn) for queue in queues.waiting.values())
    log_groups = {
        f"{name} log group": {arn(function.log_group.log_group_arn)}
        for name, function in (
            ("receiver", functions.receiver),
            ("extender", functions.extender),
            ("watcher", functions.watcher),
        )
    }
    return StackNames(
        jobs_queue=arn(queues.queue.queue_arn),
        dlq=arn(queues.dlq.queue_arn),
        waiting_queues=waiting,
        table=arn(synth.part("Leases").table.table_arn),
        state_machine=arn(machine.state_machine_arn),
        state_machine_name=arn(machine.state_machine_name),
        roles={
            "receiver": synth.logical_id(functions.receiver.role),
            "extender": synth.logical_id(functions.extender.role),
            "watcher": synth.logical_id(functions.watcher.role),
            "state_machine": synth.logical_id(machine.role),
        },
        resources={
            "*": {"*"},
            "jobs queue": {arn(queues.queue.queue_arn)},
            "waiting queues": set(waiting),
            "lease table": {arn(synth.part("Leases").table.table_arn)},
            "watcher failures queue": {arn(functions.watcher_failures.queue_arn)},
            "glue jobs": {
                f"arn:{PARTITION}:glue:{REGION}:{ACCOUNT}:job/{template.resolve(stack.resolve(job.job_name))}"
                for job in workflow.glue_jobs.values()
            },
            **log_groups,
        },
        emr_applications=tuple(
            sorted(
                arn(a) for a in (workflow.emr_serverless.application_arns.values() if workflow.emr_serverless else ())
            )
        ),
    )


# -- calls from the simulation ----------------------------------------------------------------------------------------


def _queue_arns(queue_url: str, names: StackNames) -> list[str]:
    """The stack's queue(s) a simulated queue stands for (any waiting queue: every waiting queue)."""
    name = queue_url.rsplit("/", 1)[-1].removesuffix(".fifo")
    if name == "jobs":
        return [names.jobs_queue]
    if name == "jobs-dlq":
        return [names.dlq]
    if name.startswith("jobs-waiting-"):
        return list(names.waiting_queues)
    raise AssertionError(f"the simulation used a queue the stack does not have: {queue_url}")


def _table_arn(table: str, names: StackNames, index: str | None = None) -> str:
    assert table == "leases", f"the simulation used a table the stack does not have: {table}"
    return f"{names.table}/index/{index}" if index else names.table


def trace_calls(operation: str, params: Mapping[str, Any], names: StackNames, source: str) -> Iterator[Call]:
    """The IAM actions and resources one recorded call (`service.operation` and its parameters) needs."""
    service = operation.split(".", 1)[0]
    if operation == "dynamodb.transact_write_items":
        for item in params["TransactItems"]:
            [(kind, action)] = item.items()
            yield Call(DYNAMODB_TRANSACTION_ACTIONS[kind], _table_arn(action["TableName"], names), source)
        return
    assert operation in OPERATION_ACTIONS, f"{source}: map {operation} to its IAM action in OPERATION_ACTIONS"
    action = OPERATION_ACTIONS[operation]
    if service == "sqs":
        for arn in _queue_arns(params["QueueUrl"], names):
            yield Call(action, arn, source)
    elif operation == "dynamodb.batch_get_item":
        for table in params["RequestItems"]:
            yield Call(action, _table_arn(table, names), source)
    elif service == "dynamodb":
        yield Call(action, _table_arn(params["TableName"], names, params.get("IndexName")), source)
    elif operation in ("stepfunctions.start_execution", "stepfunctions.list_executions"):
        yield Call(action, names.state_machine, source)
    elif operation == "stepfunctions.get_execution_history" and not names.emr_applications:
        # Only a run on EMR Serverless is read by the id its execution's history holds: a stack with no such
        # type names no application in `job_runs`, and its functions never read a history.
        return
    elif service == "stepfunctions":
        execution = params["executionArn"].rsplit(":", 1)[-1]
        yield Call(
            action,
            f"arn:{PARTITION}:states:{REGION}:{ACCOUNT}:execution:{names.state_machine_name}:{execution}",
            source,
        )
    elif service == "emr-serverless":
        # A stack with no EMR Serverless type names no application in `job_runs`: its functions never ask
        # (`test_iam_job_runs_of_emr_serverless_types_are_granted` checks a stack that has one).
        for application in names.emr_applications:
            run = f"/jobruns/{params['jobRunId']}" if "jobRunId" in params else ""
            yield Call(action, application + run, source)
    else:
        raise AssertionError(f"{source}: no resource mapping for {operation}")


@cache
def simulated_operations() -> dict[str, dict[str, dict[str, Any]]]:
    """Per actor: each distinct (operation, queue, table, index, transaction actions) the seeds recorded,
    with one example of its parameters. Run once per session: the seeds are deterministic."""
    from longjobs.sim.campaign import run_seed

    seen: dict[str, dict[str, dict[str, Any]]] = {}
    runs = [(profile, seed, False) for profile, seed in SEEDS] + [(profile, seed, True) for profile, seed in S3_SEEDS]
    for profile, seed, notifications in runs:
        result = run_seed(seed, profile, keep_calls=True, notifications=notifications)
        assert result.violation is None, f"{profile} seed {seed}: {result.violation}"
        assert result.trace is not None
        for line in result.trace.records:
            record = json.loads(line)
            if "call" not in record:
                continue
            params = record["params"]
            shape = (
                record["call"],
                params.get("QueueUrl"),
                params.get("TableName"),
                params.get("IndexName"),
                tuple(sorted(k for item in params.get("TransactItems", []) for k in item)),
                tuple(params.get("RequestItems", ())),
            )
            seen.setdefault(record["actor"], {}).setdefault(json.dumps(shape), {"call": record["call"], **params})
    return seen


def simulated_calls(names: StackNames) -> dict[str, list[Call]]:
    """Per role, the calls the simulation's actors made (see `ACTOR_ROLES`)."""
    calls: dict[str, list[Call]] = {role: [] for role in names.roles}
    for actor, operations in simulated_operations().items():
        if actor in ACTORS_WITHOUT_A_ROLE:
            continue
        assert actor in ACTOR_ROLES, f"the simulation has an actor no role is known for: {actor}"
        role = ACTOR_ROLES[actor]
        for example in operations.values():
            params = {key: value for key, value in example.items() if key != "call"}
            operation = example["call"]
            if role == "state_machine" and operation == "sqs.send_message":
                # the offline pyspark step (a task token on the token queue): the stack runs Glue instead
                assert params["QueueUrl"].endswith("/spark-tokens"), params["QueueUrl"]
                continue
            calls[role].extend(trace_calls(operation, params, names, f"sim {actor} {operation}"))
    return calls


# -- calls from the deployed definition -----------------------------------------------------------------------------


def _states(definition: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in definition["States"].items():
        yield name, state
        for branch in state.get("Branches", []):
            yield from _states(branch)
        if "ItemProcessor" in state:
            yield from _states(state["ItemProcessor"])


def _format_example(expression: str) -> str:
    """`States.Format('summaries/{}.json', $$.Execution.Name)` -> `summaries/x.json` (an example name)."""
    match = re.fullmatch(r"States\.Format\('([^']*)'.*\)", expression)
    assert match, f"cannot make an example of {expression}"
    return match.group(1).replace("{}", "x")


def definition_calls(synth: Synth, names: StackNames) -> list[Call]:
    """The state machine's own calls, read from the deployed definition: each Task's integration on the
    resource its static parameters name (a parameter read from the input: checked by action only)."""
    template = Template(synth.template)
    [machine] = synth.of_type("AWS::StepFunctions::StateMachine").values()
    definition = json.loads(template.resolve(machine["Properties"]["DefinitionString"]))
    calls = []
    for name, state in _states(definition):
        if state["Type"] != "Task":
            continue
        task = state["Resource"].replace(f"arn:{PARTITION}:", "arn:aws:")
        if task == "arn:aws:states:::aws-sdk:dynamodb:transactWriteItems":  # each item's own action
            for item in state["Parameters"]["TransactItems"]:
                [(kind, write)] = item.items()
                table = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{write['TableName']}"
                calls.append(Call(DYNAMODB_TRANSACTION_ACTIONS[kind], table, f"definition {name}"))
            continue
        assert task in TASK_ACTIONS, f"state {name}: map {task} to its IAM action in TASK_ACTIONS"
        action, parameters = TASK_ACTIONS[task], state.get("Parameters", {})
        resource: str | None = None
        if action.startswith("dynamodb:"):
            resource = f"arn:{PARTITION}:dynamodb:{REGION}:{ACCOUNT}:table/{parameters['TableName']}"
        elif action == "glue:StartJobRun":
            resource = f"arn:{PARTITION}:glue:{REGION}:{ACCOUNT}:job/{parameters['JobName']}"
        elif action == "emr-serverless:StartJobRun":
            calls += emr_sync_calls(parameters, name)
            resource = f"arn:{PARTITION}:emr-serverless:{REGION}:{ACCOUNT}:/applications/{parameters['ApplicationId']}"
        elif action == "s3:GetObject":
            key = parameters.get("Key") or _format_example(parameters["Key.$"])
            resource = f"arn:{PARTITION}:s3:::{parameters['Bucket']}/{key}"
        elif "QueueUrl" in parameters:
            resource = _queue_arns(parameters["QueueUrl"], names)[0]
        calls.append(Call(action, resource, f"definition {name}"))
    return calls


def emr_sync_calls(parameters: Mapping[str, Any], state: str) -> list[Call]:
    """What Step Functions calls with the role for an `emr-serverless:startJobRun.sync` task besides the start
    (https://docs.aws.amazon.com/step-functions/latest/dg/connect-emr-serverless.html, its IAM policies): it
    polls and cancels the run, passes the job role, and manages its EventBridge rule."""
    application = f"arn:{PARTITION}:emr-serverless:{REGION}:{ACCOUNT}:/applications/{parameters['ApplicationId']}"
    rule = f"arn:{PARTITION}:events:{REGION}:{ACCOUNT}:rule/StepFunctionsGetEventsForEMRServerlessJobRule"
    source = f"definition {state} (.sync)"
    return [
        Call("emr-serverless:GetJobRun", f"{application}/jobruns/00example", source),
        Call("emr-serverless:CancelJobRun", f"{application}/jobruns/00example", source),
        Call("iam:PassRole", parameters["ExecutionRoleArn"], source),
        *(Call(f"events:{action}", rule, source) for action in ("PutTargets", "PutRule", "DescribeRule")),
    ]


# -- the tests ----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def names(dev: Synth) -> StackNames:
    return stack_names(dev)


@pytest.fixture(scope="module")
def calls_by_role(dev: Synth, names: StackNames) -> dict[str, list[Call]]:
    calls = simulated_calls(names)
    calls["state_machine"] += definition_calls(dev, names)
    return calls


@pytest.mark.parametrize("role", ["receiver", "extender", "watcher", "state_machine"])
def test_iam_every_call_is_granted_and_every_grant_used_or_explained(
    dev: Synth, names: StackNames, calls_by_role: dict[str, list[Call]], role: str
) -> None:
    grants = role_grants(Template(dev.template), names.roles[role])
    calls = calls_by_role[role]
    assert calls, f"no call recorded for the {role}"
    explained = [entry for entry in EXPLAINED_GRANTS if entry.role == role]
    result = compare(calls, grants, explained, names.resources)
    assert not result.ungranted, f"the {role}'s role lacks what its code calls (AccessDenied in AWS): " + "; ".join(
        sorted({f"{c.action} on {c.resource} ({c.source})" for c in result.ungranted})
    )
    assert not result.unexplained, (
        f"the {role}'s role has grants no recorded call uses: remove them, reach them with a seed, or list "
        "them in EXPLAINED_GRANTS with the reason: "
        + "; ".join(f"{g.action} on {g.resource}" for g in result.unexplained)
    )
    assert not result.stale_explanations, f"EXPLAINED_GRANTS names grants the {role} no longer has: " + "; ".join(
        f"{e.action} on {e.resource}" for e in result.stale_explanations
    )


def test_iam_simulation_reaches_every_function_and_the_workflow(calls_by_role: dict[str, list[Call]]) -> None:
    """The evidence is real: each role's recorded calls include its characteristic ones."""
    actions = {role: {call.action for call in calls} for role, calls in calls_by_role.items()}
    assert {"states:StartExecution", "dynamodb:ConditionCheckItem", "sqs:SendMessage"} <= actions["receiver"]
    assert {"dynamodb:Query", "states:StopExecution", "sqs:DeleteMessage"} <= actions["extender"]
    assert {"sqs:ReceiveMessage", "states:StartExecution"} <= actions["watcher"]
    assert {"glue:StartJobRun", "s3:GetObject", "sqs:DeleteMessage"} <= actions["state_machine"]


def test_iam_emr_serverless_runs_are_granted_what_the_integration_calls_and_no_more(prod: Synth) -> None:
    """The prod variant runs a type on EMR Serverless: its task and what `.sync` calls are granted, on that
    application, role and rule only; the job role is passed to EMR Serverless alone."""
    template = Template(prod.template)
    [machine] = prod.of_type("AWS::StepFunctions::StateMachine").values()
    role_id = machine["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    calls = [
        call
        for call in definition_calls(prod, stack_names(prod))
        if call.action.split(":")[0] in ("emr-serverless", "iam", "events")
    ]
    assert {call.action for call in calls} == {
        "emr-serverless:StartJobRun",
        "emr-serverless:GetJobRun",
        "emr-serverless:CancelJobRun",
        "iam:PassRole",
        "events:PutTargets",
        "events:PutRule",
        "events:DescribeRule",
    }
    grants = {
        grant
        for grant in role_grants(template, role_id)
        if grant.action.split(":")[0] in ("emr-serverless", "iam", "events")
    }
    result = compare(calls, grants, [], {})
    assert not result.ungranted, [f"{c.action} on {c.resource}" for c in result.ungranted]
    assert not result.unexplained, [f"{g.action} on {g.resource}" for g in result.unexplained]
    [pass_role] = [
        statement
        for policy in prod.of_type("AWS::IAM::Policy").values()
        if {"Ref": role_id} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if statement["Action"] == "iam:PassRole"
    ]
    assert pass_role["Condition"] == {"StringEquals": {"iam:PassedToService": "emr-serverless.amazonaws.com"}}


def test_iam_job_runs_of_emr_serverless_types_are_granted(prod: Synth) -> None:
    """The prod variant runs a type on EMR Serverless: the calls a job's next attempt makes about the previous
    run (the execution's history, GetJobRun and CancelJobRun on the run it names, ListJobRuns on the
    application; `longjobs.engine.runs`) are granted to the receiver, and to the extender and the watcher,
    which run admission's receiver, on that application and this state machine's executions only."""
    template, names = Template(prod.template), stack_names(prod)
    assert names.emr_applications
    execution = f"arn:{PARTITION}:states:{REGION}:{ACCOUNT}:execution:{names.state_machine_name}:m-1-1"
    examples = {
        "stepfunctions.get_execution_history": {"executionArn": execution},
        "emr-serverless.get_job_run": {"applicationId": "sim", "jobRunId": "00r0001"},
        "emr-serverless.list_job_runs": {"applicationId": "sim"},
        "emr-serverless.cancel_job_run": {"applicationId": "sim", "jobRunId": "00r0001"},
    }
    calls = [call for operation, params in examples.items() for call in trace_calls(operation, params, names, "sim")]
    assert {call.action for call in calls} == {OPERATION_ACTIONS[operation] for operation in examples}
    asked = {"emr-serverless:", "states:GetExecutionHistory"}
    for role in ("receiver", "extender", "watcher"):
        grants = {
            grant
            for grant in role_grants(template, names.roles[role])
            if any(grant.action.lower().startswith(prefix.lower()) for prefix in asked)
        }
        result = compare(calls, grants, [], {})
        assert not result.ungranted, (role, [f"{c.action} on {c.resource}" for c in result.ungranted])
        assert not result.unexplained, (role, [f"{g.action} on {g.resource}" for g in result.unexplained])


def test_iam_each_explained_grant_has_a_reason_and_a_known_resource(names: StackNames) -> None:
    keys = [(entry.role, entry.action.lower(), entry.resource) for entry in EXPLAINED_GRANTS]
    assert len(keys) == len(set(keys)), "an explanation is listed twice"
    for entry in EXPLAINED_GRANTS:
        assert entry.role in names.roles and entry.resource in names.resources, entry
        assert len(entry.reason) > 40, entry


# -- the comparison itself, on doctored policies ---------------------------------------------------------------------


QUEUE = "arn:aws:sqs:us-east-1:123456789012:jobs"
DLQ = "arn:aws:sqs:us-east-1:123456789012:dlq"
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/leases"
RESOURCES = {"jobs queue": {QUEUE}, "*": {"*"}}


def test_iam_compare_reports_a_call_whose_grant_was_removed() -> None:
    calls = [Call("dynamodb:ConditionCheckItem", TABLE, "a transaction"), Call("dynamodb:PutItem", TABLE, "a put")]
    granted = {Grant("dynamodb:PutItem", TABLE), Grant("dynamodb:ConditionCheckItem", TABLE)}
    assert compare(calls, granted, [], RESOURCES) == Comparison([], [], [])
    doctored = granted - {Grant("dynamodb:ConditionCheckItem", TABLE)}
    assert compare(calls, doctored, [], RESOURCES).ungranted == [calls[0]]


def test_iam_compare_checks_the_resource_not_only_the_action() -> None:
    call = Call("sqs:SendMessage", DLQ, "a dead-letter send")
    assert compare([call], {Grant("sqs:SendMessage", QUEUE)}, [], RESOURCES).ungranted == [call]
    assert compare([call], {Grant("sqs:Send*", "arn:aws:sqs:us-east-1:123456789012:*")}, [], RESOURCES).ungranted == []
    execution = "arn:aws:states:us-east-1:123456789012:execution:machine:m-1"
    pattern = Grant("states:describeexecution", "arn:aws:states:us-east-1:123456789012:execution:machine:*")
    assert compare([Call("states:DescribeExecution", execution, "x")], {pattern}, [], RESOURCES).ungranted == []


def test_iam_compare_reports_an_unused_unexplained_grant_and_a_stale_explanation() -> None:
    calls = [Call("sqs:SendMessage", QUEUE, "a send")]
    extra = Grant("sqs:PurgeQueue", QUEUE)
    result = compare(calls, {Grant("sqs:SendMessage", QUEUE), extra}, [], RESOURCES)
    assert result.unexplained == [extra]
    reason = ExplainedGrant("receiver", "sqs:PurgeQueue", "jobs queue", "a reason")
    assert compare(calls, {Grant("sqs:SendMessage", QUEUE), extra}, [reason], RESOURCES).unexplained == []
    assert compare(calls, {Grant("sqs:SendMessage", QUEUE)}, [reason], RESOURCES).stale_explanations == [reason]


def test_iam_grants_are_read_from_policies_and_inline_policies_of_the_role() -> None:
    template = Template(
        {
            "Resources": {
                "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
                "Role": {
                    "Type": "AWS::IAM::Role",
                    "Properties": {
                        "Policies": [
                            {
                                "PolicyDocument": {
                                    "Statement": [
                                        {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"},
                                    ]
                                }
                            }
                        ],
                        "ManagedPolicyArns": ["arn:aws:iam::aws:policy/Admin"],
                    },
                },
                "Policy": {
                    "Type": "AWS::IAM::Policy",
                    "Properties": {
                        "Roles": [{"Ref": "Role"}],
                        "PolicyDocument": {
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Action": ["sqs:ReceiveMessage"],
                                    "Resource": [{"Fn::GetAtt": ["Queue", "Arn"]}],
                                }
                            ]
                        },
                    },
                },
            }
        }
    )
    assert role_grants(template, "Role") == {
        Grant("sqs:SendMessage", "*"),
        Grant("sqs:ReceiveMessage", "arn:aws:sqs:us-east-1:123456789012:Queue"),
        Grant("managed", "arn:aws:iam::aws:policy/Admin"),
    }
