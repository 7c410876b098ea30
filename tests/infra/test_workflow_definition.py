"""The workflow definition's states and transitions, for both pyspark steps and every runner (rendered
without deploying)."""

from __future__ import annotations

import json
from typing import Any

import aws_cdk as cdk
import pytest

from longjobs.construct.emr_serverless import EMR_SYNC_RESOURCE
from longjobs.construct.workflow import (
    DYNAMODB_TRANSIENT_ERRORS,
    PysparkStep,
    glue_pyspark_step,
    render_definition,
    token_queue_pyspark_step,
)
from longjobs.engine.execution import JOB_STEP_ERRORS
from longjobs.engine.jobs import BUILTIN_TYPES, JobType
from longjobs.engine.jobs.names import state_prefix
from longjobs.engine.runs import EMR_TASK
from longjobs.sim.emr import EMR_RESOURCE

ACCOUNT, REGION = "123456789012", "us-east-1"
JOBS_QUEUE = f"arn:aws:sqs:{REGION}:{ACCOUNT}:jobs"
NESTED_ARN = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:users-own"
USER_TYPES = [
    JobType(name="wordcount", runner="pyspark", entry="jobs/wordcount.py:run"),
    JobType(
        name="nap",
        runner="wait",
        params_schema={"type": "object", "required": ["seconds"], "properties": {"seconds": {"type": "integer"}}},
    ),
    JobType(name="batch-job", runner="state_machine", state_machine={"arn": NESTED_ARN, "timeout_minutes": 30}),
]


def render(pyspark_step: PysparkStep, job_types: list[JobType] | None = None) -> dict[str, Any]:
    text = render_definition(
        table_name="leases",
        queue_arns=[JOBS_QUEUE],
        pyspark_step=pyspark_step,
        region=REGION,
        account=ACCOUNT,
        job_types=list(BUILTIN_TYPES) if job_types is None else job_types,
    )
    return dict(json.loads(text))


def token_queue() -> PysparkStep:
    return token_queue_pyspark_step(
        queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:tokens",
        queue_url=f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/tokens",
        heartbeat=cdk.Duration.seconds(30),
        timeout=cdk.Duration.hours(2),
    )


@pytest.fixture(scope="module")
def offline() -> dict[str, Any]:
    return render(token_queue())


@pytest.fixture(scope="module")
def with_user_types() -> dict[str, Any]:
    return render(token_queue(), [*BUILTIN_TYPES, *USER_TYPES])


def branch_states(definition: dict[str, Any]) -> dict[str, Any]:
    return dict(definition["States"]["RunJob"]["Branches"][0]["States"])


def test_workflow_job_choice_routes_spark_and_wait(offline: dict[str, Any]) -> None:
    choices = branch_states(offline)["JobType"]["Choices"]
    assert [c.get("Next") for c in choices] == ["RunSparkJob", "WaitThenFail", "Wait"]
    assert branch_states(offline)["JobType"]["Default"] == "UnknownJobType"
    assert branch_states(offline)["Wait"]["SecondsPath"] == "$.job.params.seconds"


def test_workflow_catches_heartbeat_timeouts_under_both_names(offline: dict[str, Any]) -> None:
    spark = branch_states(offline)["RunSparkJob"]
    assert spark["Resource"] == "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
    assert spark["HeartbeatSeconds"] == 30
    assert spark["TimeoutSeconds"] == 2 * 3600, "always explicit: moto times a heartbeat-only task out after 60 s"
    assert spark["Parameters"]["MessageBody"]["task_token.$"] == "$$.Task.Token"
    [timeouts] = spark["Catch"]
    assert timeouts["ErrorEquals"] == ["States.HeartbeatTimeout", "States.Timeout"]
    assert branch_states(offline)[timeouts["Next"]] == {
        "Type": "Fail",
        "Error": "JobTimedOut",
        "Cause": "the job stopped sending heartbeats or ran past its timeout",
    }
    [everything] = offline["States"]["RunJob"]["Catch"]
    assert everything == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "ReadLeaseForRelease"}


def test_workflow_job_step_fails_by_itself_only_with_errors_the_receiver_knows(
    offline: dict[str, Any], with_user_types: dict[str, Any]
) -> None:
    """A job step's error that is a Python name, and none of the step's own (`JOB_STEP_ERRORS`), is taken for
    the offline worker's report of its run's end: the retry then waits for no run
    (`longjobs.engine.delivery.attempt.worker_reported_end`). A Fail state of the step's own that the
    receiver did not know would pass for that report."""
    glue = render(glue_pyspark_step({"spark": "events-pipeline"}, timeouts={"spark": cdk.Duration.hours(6)}))
    for definition in (offline, with_user_types, glue):
        fails = [state for state in branch_states(definition).values() if state["Type"] == "Fail"]
        assert fails and all("Error" in state for state in fails), "a Fail state's error read from the job's data"
        own = {state["Error"] for state in fails}
        assert own <= JOB_STEP_ERRORS, own - JOB_STEP_ERRORS


def test_workflow_settles_a_success_with_the_handle_read_at_the_start(offline: dict[str, Any]) -> None:
    """The success path reads nothing in the common case: the transaction is conditional on the handle the
    start read (a redelivery that adopted the message since wrote a newer one, so the transaction is
    refused and the step-by-step path reads the lease again), and the delete comes after the close."""
    states = offline["States"]
    assert states["RunJob"]["Next"] == "HoldsSlotAtSuccess"
    assert states["ReadLeaseAtStart"]["ResultPath"] == states["ReadLease"]["ResultPath"] == "$.lease"
    assert states["ReadLease"]["Parameters"]["ConsistentRead"] is True
    assert states["DeleteMessage"]["Resource"] == "arn:aws:states:::aws-sdk:sqs:deleteMessage"
    assert states["DeleteMessage"]["Parameters"]["ReceiptHandle.$"] == "$.lease.Item.receipt_handle.S"
    # the close and the lock's (and slot's) release in one transaction; any refusal: the same one by one
    for transaction, items in (("SucceededAndFreed", 2), ("SucceededAndFreedWithSlot", 3)):
        state = states[transaction]
        assert state["Resource"] == "arn:aws:states:::aws-sdk:dynamodb:transactWriteItems"
        updates = [item["Update"] for item in state["Parameters"]["TransactItems"]]
        assert len(updates) == items and "Retry" not in state
        assert updates[0]["ConditionExpression"] == states["MarkSucceeded"]["Parameters"]["ConditionExpression"]
        assert "#handle = :handle" in updates[0]["ConditionExpression"]
        assert updates[0]["ExpressionAttributeValues"][":handle"] == {"S.$": "$.lease.Item.receipt_handle.S"}
        assert updates[1]["ConditionExpression"] == states["ReleaseJobLock"]["Parameters"]["ConditionExpression"]
        assert state["Catch"] == [
            {"ErrorEquals": ["States.ALL"], "ResultPath": "$.settle_error", "Next": "MarkSucceeded"}
        ]
        assert state["ResultPath"] == "$.settled" and state["Next"] == "DeleteMessage"
    assert states["MarkSucceeded"]["Next"] == "DeleteMessage"
    [conflict, for_good] = states["MarkSucceeded"]["Catch"]
    assert conflict["Next"] == "ReadLease", "a newer handle: read and settle again"
    assert for_good == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.close_error", "Next": "DeleteMessage"}, (
        "a close refused after its retries: the job succeeded, its message is deleted all the same"
    )
    # after the delete (or its refusal): the transaction freed the holds, or they are freed one by one
    assert states["DeleteMessage"]["Next"] == states["DeleteMessage"]["Catch"][0]["Next"] == "FreedAtOnce"
    assert states["FreedAtOnce"]["Choices"] == [{"Variable": "$.settled", "IsPresent": True, "Next": "JobSucceeded"}]
    assert states["FreedAtOnce"]["Default"] == "ReleaseJobLock"
    assert states["AlreadySettled"]["Choices"][0]["Next"] == "DeleteMessage", "closed unanswered: delete, free"
    assert states["AlreadySettled"]["Default"] == "HoldsSlotAtSuccess", "read again: settle with the new handle"
    release = states["ReleaseMessage"]["Parameters"]
    assert release["ReceiptHandle.$"] == "$.lease.Item.receipt_handle.S"
    assert release["VisibilityTimeout.$"] == "$.release_delay_s"
    # close first, then give the message back: no renewal that read the lease earlier can outlive it
    assert states["MarkReleased"]["Next"] == "ReleaseJobLockOnFailure"
    assert (
        states["ReleaseJobLockOnFailure"]["Next"] == "HoldsSlotOnFailure"
        and states["ReleaseSlotOnFailure"]["Next"] == "ReadForRelease"
        and states["ReadForRelease"]["Default"] == "ReleaseMessage"
        and states["ReleaseMessage"]["Next"] == "JobFailed"
    ), "the slot is returned before the message is given back"
    assert states["JobFailed"]["Type"] == "Fail"


def test_workflow_frees_the_holds_after_a_read_of_the_lease_that_fails_for_good(offline: dict[str, Any]) -> None:
    """Seed 5054: a close that landed unanswered, then every read failed; the execution ended with its job
    lock held, and with its status event lost nothing freed it. Each path's read is caught into its lock
    and slot releases (each conditional on this execution); the failure path then gives nothing back by
    a handle it could not read (reconciliation releases a lease left ACTIVE)."""
    states = offline["States"]
    for read, release in (("ReadLease", "ReleaseJobLock"), ("ReadLeaseForRelease", "ReleaseJobLockOnFailure")):
        assert states[read]["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.read_error", "Next": release}]
        assert states[read]["Retry"][0]["ErrorEquals"] == DYNAMODB_TRANSIENT_ERRORS, "retried first"
        assert states[release]["Parameters"]["ConditionExpression"] == "#state = :held AND #execution = :self"
    assert states["ReadForRelease"]["Choices"] == [{"Variable": "$.read_error", "IsPresent": True, "Next": "JobFailed"}]
    assert states["ReleaseSlot"]["Next"] == "JobSucceeded", "the job succeeded: reconciliation completes its lease"


def test_workflow_fences_every_settlement_by_the_execution_that_owns_the_lease(offline: dict[str, Any]) -> None:
    states = offline["States"]
    assert offline["StartAt"] == "Self"
    assert states["Self"] == {
        "Type": "Pass",
        "ResultPath": "$.self",
        "Parameters": {"execution.$": "$$.Execution.Id"},
        "Next": "ReadLeaseAtStart",
    }
    owned = {
        "And": [
            {"Variable": "$.lease.Item.execution_arn.S", "IsPresent": True},
            {"Variable": "$.lease.Item.execution_arn.S", "StringEqualsPath": "$.self.execution"},
        ]
    }
    for choice, then in (
        ("OwnsLeaseAtStart", "RunJob"),
        ("OwnsLease", "AlreadySettled"),
        ("OwnsLeaseForRelease", "ReleasedErrorHasCause"),
        ("ReleasedByThisExecution", "ReleaseJobLockOnFailure"),
    ):
        [rule] = states[choice]["Choices"]
        assert {k: v for k, v in rule.items() if k != "Next"} == owned and rule["Next"] == then, choice
    assert states["OwnsLeaseAtStart"]["Default"] == "NotHeld"
    assert states["NotHeld"] == {
        "Type": "Fail",
        "Error": "LeaseNotHeld",
        "Cause": "its lease is closed or names another execution",
    }
    for task in ("MarkSucceeded", "MarkReleased", "MarkLost"):
        condition = states[task]["Parameters"]["ConditionExpression"]
        assert condition.startswith("#execution = :self"), task
        assert states[task]["Parameters"]["ExpressionAttributeValues"][":self"] == {"S.$": "$.self.execution"}


def test_workflow_records_a_release_refused_for_a_gone_handle_as_lost(offline: dict[str, Any]) -> None:
    states = offline["States"]
    [catch] = states["ReleaseMessage"]["Catch"]
    assert catch == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.release_error", "Next": "ReleaseRefused"}
    refused = json.dumps(states["ReleaseRefused"]["Choices"])
    assert "*.ReceiptHandleIsInvalidException" in refused and "*expired*" in refused
    assert states["ReleaseRefused"]["Choices"][0]["Next"] == "LostErrorHasCause"
    assert states["LostErrorWithCause"]["Next"] == states["LostErrorWithoutCause"]["Next"] == "MarkLost"
    assert states["ReleaseRefused"]["Default"] == "JobFailed", "anything else: RELEASED, back when its chunk ends"
    assert states["MarkLost"]["Parameters"]["ExpressionAttributeValues"][":status"] == {"S": "LOST"}


@pytest.mark.parametrize(
    ("prefix", "caught", "close"),
    [("ReleasedError", "$.error", "MarkReleased"), ("LostError", "$.release_error", "MarkLost")],
)
def test_workflow_writes_the_last_error_as_a_map_with_its_cause_when_it_has_one(
    offline: dict[str, Any], prefix: str, caught: str, close: str
) -> None:
    states = offline["States"]
    cause = f"{caught}.Cause"
    assert states[f"{prefix}HasCause"]["Choices"] == [
        {
            "And": [
                {"Variable": cause, "IsPresent": True},
                {"Variable": cause, "IsString": True},
                {"Not": {"Variable": cause, "StringEquals": ""}},
            ],
            "Next": f"{prefix}WithCause",
        }
    ]
    assert states[f"{prefix}HasCause"]["Default"] == f"{prefix}WithoutCause"
    error = {"S.$": f"{caught}.Error"}
    assert states[f"{prefix}WithCause"]["Parameters"] == {"Error": error, "Cause": {"S.$": cause}}
    assert states[f"{prefix}WithoutCause"]["Parameters"] == {"Error": error}, "no path that may match nothing"
    for built in (f"{prefix}WithCause", f"{prefix}WithoutCause"):
        assert states[built]["ResultPath"] == "$.last_error" and states[built]["Next"] == close
    parameters = states[close]["Parameters"]
    assert parameters["ExpressionAttributeNames"]["#attr"] == "last_error"
    assert parameters["ExpressionAttributeValues"][":value"] == {"M.$": "$.last_error"}


def test_workflow_retries_throttling_on_every_sqs_and_dynamodb_task(offline: dict[str, Any]) -> None:
    for name in (
        "ReadLease",
        "DeleteMessage",
        "MarkSucceeded",
        "ReleaseJobLock",
        "ReleaseJobLockOnFailure",
        "ReadLeaseForRelease",
        "ReleaseMessage",
        "MarkReleased",
        "MarkLost",
        "ReadLeaseAtStart",
    ):
        [retry] = offline["States"][name]["Retry"]
        assert any("Throttl" in error or "ProvisionedThroughput" in error for error in retry["ErrorEquals"]), name
        assert retry["BackoffRate"] == 2 and retry["JitterStrategy"] == "FULL"


def test_workflow_cloud_spark_step_is_a_synchronous_glue_run() -> None:
    definition = render(glue_pyspark_step({"spark": "events-pipeline"}, timeouts={"spark": cdk.Duration.hours(6)}))
    spark = branch_states(definition)["RunSparkJob"]
    assert spark["Resource"] == "arn:aws:states:::glue:startJobRun.sync"
    assert spark["Parameters"]["JobName"] == "events-pipeline"
    assert spark["Parameters"]["Arguments"]["--params.$"] == "States.JsonToString($.job.params)"
    assert spark["Parameters"]["Timeout"] == 6 * 60, "Glue's own run timeout, in minutes"
    assert spark["TimeoutSeconds"] == 6 * 3600 + 15 * 60, "the step's own, so its JobTimedOut catch can fire"


def test_workflow_has_a_branch_per_declared_type_in_order(with_user_types: dict[str, Any]) -> None:
    choice = branch_states(with_user_types)["JobType"]
    rules = [(rule.get("Variable") or json.dumps(rule), rule["Next"]) for rule in choice["Choices"]]
    assert [next_state for _, next_state in rules] == [
        "RunSparkJob",
        "WaitThenFail",
        "Wait",
        "RunWordcountJob",
        "NapWaitThenFail",
        "NapWait",
        "RunBatchJobStateMachine",
    ], "the built-ins keep their state names; echo (inline) has no branch"
    assert choice["Choices"][3] == {"Variable": "$.job.type", "StringEquals": "wordcount", "Next": "RunWordcountJob"}
    assert choice["Default"] == "UnknownJobType"
    states = branch_states(with_user_types)
    wordcount = states["RunWordcountJob"]
    assert wordcount["Resource"] == "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
    assert wordcount["Parameters"]["MessageBody"]["job.$"] == "$.job", "the worker reads the type from the job"
    assert wordcount["Catch"][0]["Next"] == "JobTimedOut"


def test_workflow_state_machine_type_is_a_nested_sync_execution_of_the_params(
    with_user_types: dict[str, Any],
) -> None:
    nested = branch_states(with_user_types)["RunBatchJobStateMachine"]
    assert nested["Resource"] == "arn:aws:states:::states:startExecution.sync:2"
    assert nested["Parameters"] == {"StateMachineArn": NESTED_ARN, "Input.$": "$.job.params"}
    assert nested["TimeoutSeconds"] == 30 * 60
    assert nested["ResultSelector"]["output.$"] == "States.StringToJson($.Output)"
    assert nested["Catch"][0] == {"ErrorEquals": ["States.HeartbeatTimeout", "States.Timeout"], "Next": "JobTimedOut"}


def test_workflow_every_branch_ends_in_the_same_fenced_paths(with_user_types: dict[str, Any]) -> None:
    states = with_user_types["States"]
    assert states["OwnsLeaseAtStart"]["Choices"][0]["Next"] == "RunJob"
    assert len(states["RunJob"]["Branches"]) == 1, "one branch (the type Choice) inside the one Parallel"
    assert states["RunJob"]["Next"] == "HoldsSlotAtSuccess"
    assert states["RunJob"]["Catch"] == [
        {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "ReadLeaseForRelease"}
    ]
    inner = branch_states(with_user_types)
    assert all("Next" not in s or s["Next"] in inner for s in inner.values()), "no branch leaves the Parallel"


def test_workflow_releases_the_job_lock_only_when_the_lock_names_this_execution(offline: dict[str, Any]) -> None:
    states = offline["States"]
    assert states["FreedAtOnce"]["Default"] == "ReleaseJobLock"
    assert states["ReleaseJobLock"]["Next"] == "HoldsSlot"
    assert states["ReleaseJobLock"]["Catch"][0]["Next"] == "HoldsSlot", "best effort: a stale lock is taken over"
    assert states["MarkReleased"]["Next"] == "ReleaseJobLockOnFailure"
    assert states["ReleaseJobLockOnFailure"]["Next"] == "HoldsSlotOnFailure"
    for name in ("ReleaseJobLock", "ReleaseJobLockOnFailure"):
        params = states[name]["Parameters"]
        assert params["Key"] == {"pk": {"S.$": "States.Format('job#{}', $.job.job_id)"}}
        assert params["ConditionExpression"] == "#state = :held AND #execution = :self"
        assert params["ExpressionAttributeValues"][":self"] == {"S.$": "$.self.execution"}


def test_workflow_returns_an_admission_slot_only_when_it_names_this_execution(offline: dict[str, Any]) -> None:
    """Both ends return the slot the execution's input names (a limited type's), conditional on the slot
    naming this execution, noting when (the holding time is the estimate's data); best effort: a slot
    left held is freed by the extender's sweep."""
    states = offline["States"]
    for suffix, then in (("", "JobSucceeded"), ("OnFailure", "ReadForRelease")):
        choice = states[f"HoldsSlot{suffix}"]
        assert choice["Choices"] == [{"Variable": "$.slot", "IsPresent": True, "Next": f"ReleaseSlot{suffix}"}]
        assert choice["Default"] == then, "an unlimited type holds no slot"
        release = states[f"ReleaseSlot{suffix}"]
        params = release["Parameters"]
        assert params["Key"] == {"pk": {"S.$": "$.slot"}}
        assert params["ConditionExpression"] == "#state = :held AND #execution = :self"
        assert params["ExpressionAttributeValues"][":self"] == {"S.$": "$.self.execution"}
        assert params["ExpressionAttributeValues"][":now"] == {"S.$": "$$.State.EnteredTime"}
        assert release["Next"] == then and release["Catch"][0]["Next"] == then


def test_workflow_refuses_two_types_with_the_same_state_names() -> None:
    twins = [
        JobType(name="my-job", runner="pyspark", entry="a.py:run"),
        JobType(name="my_job", runner="pyspark", entry="b.py:run"),
    ]
    with pytest.raises(ValueError, match="'my-job' and 'my_job' have the same state names"):
        render(token_queue(), twins)


def test_workflow_offline_spark_step_is_bounded_by_its_types_own_glue_timeout() -> None:
    """Offline, a pyspark type whose Glue job sets `glue.timeout_minutes` runs under that limit, as its Glue
    run would: a job too slow for it fails offline too. A type that sets none keeps the step's default."""
    quick = JobType(name="quick", runner="pyspark", entry="jobs/wordcount.py:run", glue={"timeout_minutes": 1})
    states = branch_states(render(token_queue(), [*BUILTIN_TYPES, quick]))
    assert states[f"Run{state_prefix(quick)}Job"]["TimeoutSeconds"] == 60
    assert states["RunSparkJob"]["TimeoutSeconds"] == 2 * 3600


def test_workflow_emr_serverless_task_is_the_one_the_receiver_reads_in_histories() -> None:
    """Before a retry, the receiver finds an EMR Serverless run's id in the history events of the workflow's
    EMR Serverless task, named by their `resourceType` and `resource` (`longjobs.engine.runs.EMR_TASK`). The
    stack's step and the simulation's both call that task."""
    assert ":".join(EMR_TASK) == EMR_SYNC_RESOURCE
    assert f"arn:aws:states:::{EMR_SYNC_RESOURCE}" == EMR_RESOURCE
