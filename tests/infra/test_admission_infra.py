"""Admission in the stack: a limited job type gets a waiting queue, the functions the permissions and
settings an admission pass needs, the watcher every end, and the dashboard the type's admission graph."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import aws_cdk as cdk
import pytest

from longjobs.construct import LongJobProcessor
from longjobs.construct.config import ConfigError
from longjobs.construct.nag import render_cfn
from longjobs.engine.jobs.types import MAX_WAIT_S
from longjobs.engine.settings import Settings

LIMITED = {
    "name": "backfill",
    "runner": "wait",
    "max_concurrency": 50,
    "params_schema": {
        "type": "object",
        "required": ["seconds"],
        "properties": {"seconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_S}},
    },
}


RETENTION_S = 10 * 86_400
"""The `queue_retention_s` setting of this stack (14 days by default)."""


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[cdk.Stack, LongJobProcessor, dict[str, Any]]]:
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = cdk.Stack(app, "Admission")
    engine = {"max_attempts": 3, "queue_retention_s": RETENTION_S}
    processor = LongJobProcessor(stack, "Jobs", job_types=[LIMITED], engine=engine)
    yield stack, processor, app.synth().get_stack_by_name("Admission").template


def resource(stack: cdk.Stack, template: dict[str, Any], construct: Any) -> dict[str, Any]:
    return dict(template["Resources"][stack.resolve(stack.get_logical_id(construct.node.default_child))])


def policy_of(template: dict[str, Any], role_prefix: str) -> set[tuple[str, str]]:
    """(action, resource) pairs granted to the function role whose logical id starts with `role_prefix`."""
    granted = set()
    for policy in (r for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"):
        roles = [render_cfn(role) for role in policy["Properties"]["Roles"]]
        if not any(role.startswith(f"<{role_prefix}") for role in roles):
            continue
        for s in policy["Properties"]["PolicyDocument"]["Statement"]:
            actions = [s["Action"]] if isinstance(s["Action"], str) else s["Action"]
            resources = s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]]
            granted |= {(action, render_cfn(res)) for action in actions for res in resources}
    return granted


def test_admission_limited_type_gets_a_waiting_queue_like_the_jobs_queue(
    synth: tuple[cdk.Stack, LongJobProcessor, dict[str, Any]],
) -> None:
    stack, processor, template = synth
    waiting = processor.queues.waiting["backfill"]
    assert sorted(t.name for t in processor.catalog.limited()) == ["backfill", "spark"], "spark: its Glue job's limit"
    assert sorted(processor.queues.waiting) == sorted(t.name for t in processor.catalog), "a queue per type"
    props, jobs = (
        resource(stack, template, waiting)["Properties"],
        resource(stack, template, processor.queue)["Properties"],
    )
    assert props["SqsManagedSseEnabled"] is True
    assert props["RedrivePolicy"] == jobs["RedrivePolicy"], "the same DLQ and backstop"
    dlq = resource(stack, template, processor.dead_letter_queue)["Properties"]
    assert props["MessageRetentionPeriod"] == jobs["MessageRetentionPeriod"] == RETENTION_S, "queue_retention_s"
    assert dlq["MessageRetentionPeriod"] == 14 * 86_400, "the DLQ keeps SQS's longest, whatever the queues keep"
    backstop = Settings(max_attempts=3).redrive_max_receives(RETENTION_S)
    assert jobs["RedrivePolicy"]["maxReceiveCount"] == backstop
    assert backstop >= 3 * 3 + 1 + 100, "attempts with their faults, and an hour's wait for each hour of retention"
    mappings = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    assert len(mappings) == 1, "no mapping on the waiting queue: only admission receives from it"


def test_admission_functions_know_the_waiting_queues_and_may_admit(
    synth: tuple[cdk.Stack, LongJobProcessor, dict[str, Any]],
) -> None:
    stack, processor, template = synth
    waiting = render_cfn(stack.resolve(processor.queues.waiting["backfill"].queue_arn))
    jobs_queue = render_cfn(stack.resolve(processor.queue.queue_arn))
    table = render_cfn(stack.resolve(processor.table.table_arn))
    machine = render_cfn(stack.resolve(processor.state_machine.state_machine_arn))
    functions = processor.functions
    for function in (functions.receiver, functions.extender, functions.watcher):
        env = resource(stack, template, function)["Properties"]["Environment"]["Variables"]
        assert "backfill" in render_cfn(env["WAITING_QUEUES"]), function.node.id
    receiver = policy_of(template, "JobsFunctionsReceiverRole")
    assert {("sqs:SendMessage", waiting), ("dynamodb:BatchGetItem", table)} <= receiver, "parks; reads the slots"
    for name in ("Extender", "Watcher"):
        granted = policy_of(template, f"JobsFunctions{name}Role")
        assert {
            ("sqs:ReceiveMessage", waiting),
            ("sqs:DeleteMessage", waiting),
            # an unparked message waits for its job id on the jobs queue, or is parked again
            ("sqs:SendMessage", jobs_queue),
            ("sqs:SendMessage", waiting),
            ("states:StartExecution", machine),
            ("dynamodb:PutItem", table),
            ("dynamodb:Query", f"{table}/index/waiting"),
        } <= granted, name
        env = resource(stack, template, getattr(functions, name.lower()))["Properties"]["Environment"]["Variables"]
        assert {"QUEUE_URL", "DLQ_URL", "STATE_MACHINE_ARN"} <= set(env), name


def test_admission_watcher_hears_every_end_of_an_execution(
    synth: tuple[cdk.Stack, LongJobProcessor, dict[str, Any]],
) -> None:
    _, _, template = synth
    [rule] = [r for r in template["Resources"].values() if r["Type"] == "AWS::Events::Rule"]
    assert sorted(rule["Properties"]["EventPattern"]["detail"]["status"]) == [
        "ABORTED",
        "FAILED",
        "SUCCEEDED",
        "TIMED_OUT",
    ], "a success frees a slot too"


def test_admission_dashboard_shows_slots_waiting_and_delays_per_type(
    synth: tuple[cdk.Stack, LongJobProcessor, dict[str, Any]],
) -> None:
    _, _, template = synth
    [dashboard] = [r for r in template["Resources"].values() if r["Type"] == "AWS::CloudWatch::Dashboard"]
    body = json.loads(render_cfn(dashboard["Properties"]["DashboardBody"]).replace("<", "").replace(">", ""))
    [widget] = [w for w in body["widgets"] if w["properties"].get("title") == "Admission: backfill"]
    metrics = widget["properties"]["metrics"]
    names = {m[1] for m in metrics if len(m) > 1 and m[0] == "LongJobs"}
    assert {"SlotsInUse", "WaitingMessages", "ParkedMessages", "AdmissionDelay"} <= names
    assert all("job_type" in m and "backfill" in m for m in metrics if m[0] == "LongJobs"), "per type"


def test_admission_pyspark_type_is_limited_by_its_glue_jobs_concurrent_runs(
    synth: tuple[cdk.Stack, LongJobProcessor, dict[str, Any]],
) -> None:
    _, processor, _ = synth
    assert processor.catalog.limit("spark") == processor.config.infra.glue_max_concurrent_runs == 10
    assert processor.catalog.limit("backfill") == 50
    assert processor.catalog.limit("wait") is None


def test_admission_stack_without_limited_types_keeps_a_waiting_queue_per_type(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With no type limited, each type still has its waiting queue, and the extender may start what it finds
    there: a deploy that removed the type's limit left it (`unpark_unlimited`). The watcher admits nothing."""
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = cdk.Stack(app, "Plain")
    unlimited = {**LIMITED, "name": "canary", "max_concurrency": None}
    processor = LongJobProcessor(
        stack, "Jobs", job_types=[unlimited], s3_triggers=[], include_builtin_job_types=False, nag=False
    )
    template = app.synth().get_stack_by_name("Plain").template
    assert set(processor.queues.waiting) == {"canary"}
    env = resource(stack, template, processor.functions.extender)["Properties"]["Environment"]["Variables"]
    assert "canary" in json.dumps(stack.resolve(env["WAITING_QUEUES"]))
    start = ("states:StartExecution", render_cfn(stack.resolve(processor.state_machine.state_machine_arn)))
    assert start in policy_of(template, "JobsFunctionsExtenderRole")
    assert start not in policy_of(template, "JobsFunctionsWatcherRole"), "the watcher admits limited types only"


def test_admission_horizon_that_leaves_a_limited_run_too_little_of_12_h_is_refused() -> None:
    stack = cdk.Stack(cdk.App(), "TooLong")
    with pytest.raises(ConfigError, match=r"admission_horizon_s=21600.*lower admission_horizon_s to \d+ or less"):
        LongJobProcessor(stack, "Jobs", engine={"admission_horizon_s": 6 * 3_600}, nag=False)


def test_admission_horizon_refused_for_a_limited_wait_type_names_the_largest_that_fits() -> None:
    """A wait type runs no job of its own: the wait on the receive alone (twice the horizon and a period)
    must fit in SQS's 12 h less cap_safety_s, so 21540 s is the largest horizon, not the setting's 21600."""
    alone = {"job_types": [LIMITED], "include_builtin_job_types": False, "s3_triggers": [], "nag": False}
    engine = {"admission_horizon_s": 6 * 3_600}
    with pytest.raises(ConfigError) as caught:
        LongJobProcessor(cdk.Stack(cdk.App(), "Wait"), "Jobs", engine=engine, **alone)
    assert "lower admission_horizon_s to 21540 or less" in str(caught.value)
    assert "its run may take" not in str(caught.value), "a wait type's run is no run of its own"
    engine = {"admission_horizon_s": 21_540}
    LongJobProcessor(cdk.Stack(cdk.App(), "Fits"), "Jobs", engine=engine, **alone)


def _waiting_queue_ids(tmp_path_factory: pytest.TempPathFactory, job_types: list[dict[str, Any]]) -> dict[str, str]:
    app = cdk.App(outdir=str(tmp_path_factory.mktemp("cdk.out")))
    stack = cdk.Stack(app, "Admission")
    processor = LongJobProcessor(stack, "Jobs", job_types=job_types)
    return {
        name: str(stack.resolve(stack.get_logical_id(queue.node.default_child)))
        for name, queue in processor.queues.waiting.items()
    }


def test_admission_limited_type_added_after_the_others_keeps_their_waiting_queues(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """docs/deploy.md's safe way to add a limit: a type appended to the catalog leaves every waiting queue
    its logical id, so CloudFormation replaces none (a replaced queue is deleted with its parked copies)."""
    later = {**LIMITED, "name": "a-later", "max_concurrency": 3}
    before = _waiting_queue_ids(tmp_path_factory, [LIMITED])
    after = _waiting_queue_ids(tmp_path_factory, [LIMITED, later])
    assert {name: after[name] for name in before} == before
    assert after["a-later"] not in before.values()


def test_admission_limit_removed_keeps_the_other_types_waiting_queues(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A limit removed keeps every waiting queue, that type's too, under its logical id: CloudFormation
    deletes and replaces none, so the copies parked in it and the running jobs unparked from it stay
    (docs/deploy.md). SQS's DeleteQueue: "any messages in the queue are no longer available"."""
    first = {**LIMITED, "name": "a-first", "max_concurrency": 3}
    before = _waiting_queue_ids(tmp_path_factory, [first, LIMITED])
    after = _waiting_queue_ids(tmp_path_factory, [{**first, "max_concurrency": None}, LIMITED])
    assert after == before
