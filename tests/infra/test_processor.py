"""`LongJobProcessor` in a user's own app: a plain stack, the construct, a custom PySpark job type.

The app is written as a user would write it, in a temporary project folder (its job's script there,
its entry relative to that folder), and synthesized with the construct's own cdk-nag check on.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from aws_cdk.assertions import Annotations, Match, Template
from cdk_nag import AwsSolutionsChecks

from app import main as app_main
from longjobs.construct import LongJobProcessor
from longjobs.construct.config import ConfigError
from longjobs.construct.nag import render_cfn
from longjobs.engine.jobs import JobTypeError
from longjobs.engine.settings import Settings
from tests import REPO_ROOT
from tests.infra.test_stack_compliance import nag_violations

SCRIPT = """
def run(spark, params):
    rows = spark.read.json(params["input"])
    return {"rows": rows.count()}
"""
ROWS_TYPE = {
    "name": "rows",
    "runner": "pyspark",
    "entry": "jobs/rows.py:run",
    "params_schema": {
        "type": "object",
        "required": ["input"],
        "additionalProperties": False,
        "properties": {"input": {"type": "string"}},
    },
    "glue": {"worker_type": "G.2X", "workers": 3, "timeout_minutes": 30},
}
BATCH_ARN = "arn:aws:states:us-east-1:111122223333:stateMachine:nightly-batch"
PRODUCER_ACCOUNT = "444455556666"
BATCH_TYPE = {"name": "batch", "runner": "state_machine", "state_machine": {"arn": BATCH_ARN, "timeout_minutes": 90}}


class UserStack(cdk.Stack):
    """What a user writes: their own stack, with the processor as one of its parts."""

    def __init__(self, scope: cdk.App, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.producer = iam.Role(self, "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
        self.jobs = LongJobProcessor(
            self,
            "Jobs",
            job_types=[ROWS_TYPE, BATCH_TYPE],
            infra={"receiver_max_concurrency": 4},
            engine={"max_attempts": 4, "max_renewal_s": 21_600},
            producers=[self.producer, iam.AccountPrincipal(PRODUCER_ACCOUNT)],
        )


@pytest.fixture(scope="module")
def user_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[UserStack, dict[str, Any], Path]]:
    project = tmp_path_factory.mktemp("user-project")
    (project / "jobs").mkdir()
    (project / "jobs" / "rows.py").write_text(SCRIPT)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)  # the user runs `cdk synth` in their project: entries are relative to it
        app = cdk.App(outdir=str(project / "cdk.out"))
        stack = UserStack(app, "UserStack")
        template = app.synth().get_stack_by_name("UserStack").template
    yield stack, template, project / "cdk.out"


def resource(stack: cdk.Stack, template: dict[str, Any], construct: Any) -> dict[str, Any]:
    logical_id = stack.resolve(stack.get_logical_id(construct.node.default_child))
    return dict(template["Resources"][logical_id])


def test_user_app_gets_a_glue_job_for_its_pyspark_type(user_app: tuple[UserStack, dict[str, Any], Path]) -> None:
    stack, template, outdir = user_app
    assert sorted(stack.jobs.glue_jobs) == ["rows", "spark"]
    props = resource(stack, template, stack.jobs.glue_jobs["rows"])["Properties"]
    assert (props["WorkerType"], props["NumberOfWorkers"], props["Timeout"]) == ("G.2X", 3, 30)
    assert props["DefaultArguments"]["--job-module"] == "rows" and props["DefaultArguments"]["--job-function"] == "run"
    entry_zip = render_cfn(props["DefaultArguments"]["--extra-py-files"]).split(",")[1]
    staged = outdir / f"asset.{entry_zip.rsplit('/', 1)[1].removesuffix('.zip')}"
    assert (staged / "rows.py").read_text() == SCRIPT


def test_user_app_workflow_has_a_branch_for_its_type(user_app: tuple[UserStack, dict[str, Any], Path]) -> None:
    stack, template, _ = user_app
    machine = resource(stack, template, stack.jobs.state_machine)
    definition = json.loads(render_cfn(machine["Properties"]["DefinitionString"]))
    branch = definition["States"]["RunJob"]["Branches"][0]["States"]
    assert {"Variable": "$.job.type", "StringEquals": "rows", "Next": "RunRowsJob"} in branch["JobType"]["Choices"]
    assert branch["RunRowsJob"]["Resource"] == "arn:<AWS::Partition>:states:::glue:startJobRun.sync"
    assert branch["RunRowsJob"]["Parameters"]["JobName"] == (
        f"<{stack.resolve(stack.get_logical_id(stack.jobs.glue_jobs['rows'].node.default_child))}>"
    )


def test_user_app_receiver_knows_its_types_schema(user_app: tuple[UserStack, dict[str, Any], Path]) -> None:
    stack, template, outdir = user_app
    receiver = resource(stack, template, stack.jobs.functions.receiver)
    shipped = outdir / f"asset.{receiver['Properties']['Code']['S3Key'].removesuffix('.zip')}"
    catalog = json.loads((shipped / "longjobs" / "engine" / "job_types.json").read_text())
    rows = next(t for t in catalog["job_types"] if t["name"] == "rows")
    assert rows["params_schema"] == ROWS_TYPE["params_schema"]
    assert {t["name"] for t in catalog["job_types"]} == {"spark", "wait", "echo", "rows", "batch"}


def test_user_app_state_machine_type_runs_nested_with_its_grants(
    user_app: tuple[UserStack, dict[str, Any], Path],
) -> None:
    stack, template, _ = user_app
    machine = resource(stack, template, stack.jobs.state_machine)
    definition = json.loads(render_cfn(machine["Properties"]["DefinitionString"]))
    nested = definition["States"]["RunJob"]["Branches"][0]["States"]["RunBatchStateMachine"]
    assert nested["Resource"] == "arn:<AWS::Partition>:states:::states:startExecution.sync:2"
    assert nested["Parameters"] == {"StateMachineArn": BATCH_ARN, "Input.$": "$.job.params"}
    role = render_cfn(machine["Properties"]["RoleArn"]).split(".")[0].strip("<")
    statements = [
        statement
        for policy in template["Resources"].values()
        if policy["Type"] == "AWS::IAM::Policy" and {"Ref": role} in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    ]
    granted = {
        (action, render_cfn(res))
        for s in statements
        for action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        for res in ([s["Resource"]] if not isinstance(s["Resource"], list) else s["Resource"])
    }
    assert ("states:StartExecution", BATCH_ARN) in granted
    executions = "arn:<AWS::Partition>:states:<AWS::Region>:<AWS::AccountId>:execution:nightly-batch*"
    assert ("states:DescribeExecution", executions) in granted, "CDK's grant: this stack's account and region"


def test_user_app_parts_are_attributes_and_settings_apply(user_app: tuple[UserStack, dict[str, Any], Path]) -> None:
    stack, template, _ = user_app
    jobs = stack.jobs
    queue = resource(stack, template, jobs.queue)["Properties"]
    # the redrive is the backstop derived from max_attempts
    assert queue["RedrivePolicy"]["maxReceiveCount"] == Settings(max_attempts=4).redrive_max_receives(14 * 86_400)
    assert queue["RedrivePolicy"]["maxReceiveCount"] == 376
    assert jobs.dead_letter_queue is not jobs.queue and jobs.table is not None and jobs.dashboard is not None
    mapping = next(r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::EventSourceMapping")
    assert mapping["Properties"]["ScalingConfig"] == {"MaximumConcurrency": 4}
    assert all(not key.startswith("SchedulerRoleForTarget") for key in template["Resources"]), (
        "no stack-wide scheduler role: the extender's schedule has its own, in the construct"
    )


def test_user_app_publishes_the_renewal_its_receiver_checks_a_wait_with(
    user_app: tuple[UserStack, dict[str, Any], Path],
) -> None:
    """`longjobs submit` refuses a wait that outlasts renewal, as the receiver does: with the app's
    `max_renewal_s`, which the stack publishes beside its job types."""
    _, template, _ = user_app
    [published] = [
        r for k, r in template["Resources"].items() if r["Type"] == "Custom::AWS" and "PublishedCatalog" in k
    ]
    item = json.loads(render_cfn(published["Properties"]["Create"]))["parameters"]["Item"]
    checks = json.loads(item["receiver_checks"]["S"])
    assert (checks.pop("max_renewal_s"), checks.pop("cap_safety_s")) == (21_600, 60)
    assert set(checks) == {"max_body_bytes", "curated_uri", "quarantine_uri", "raw_uri"}


def statements(template: dict[str, Any], resource_type: str) -> list[dict[str, Any]]:
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == resource_type
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_user_app_producers_may_send_jobs_and_nothing_more(user_app: tuple[UserStack, dict[str, Any], Path]) -> None:
    """A role of the app gets the send on its own policy; another account's principal, on the queue's."""
    stack, template, _ = user_app
    queue_arn = {"Fn::GetAtt": [stack.resolve(stack.get_logical_id(stack.jobs.queue.node.default_child)), "Arn"]}
    producer = stack.resolve(stack.get_logical_id(stack.producer.node.default_child))
    own = [
        resource["Properties"]["PolicyDocument"]["Statement"]
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": producer} in resource["Properties"]["Roles"]
    ]
    assert own == [[{"Action": SEND_ACTIONS, "Effect": "Allow", "Resource": queue_arn}]]
    crossing = [
        statement
        for statement in statements(template, "AWS::SQS::QueuePolicy")
        if "AWS" in statement.get("Principal", {}) and PRODUCER_ACCOUNT in json.dumps(statement["Principal"])
    ]
    assert [(s["Action"], s["Resource"]) for s in crossing] == [(SEND_ACTIONS, queue_arn)]


SEND_ACTIONS = ["sqs:SendMessage", "sqs:GetQueueAttributes", "sqs:GetQueueUrl"]
"""What CDK's `Queue.grant_send_messages` grants (https://docs.aws.amazon.com/cdk/api/v2/docs/aws-cdk-lib.aws_sqs.Queue.html#grantwbrsendwbrmessagesgrantee)."""


def test_processor_producer_in_another_account_may_use_the_customer_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `kms_key`, a message is encrypted with it as it is sent: the producer needs the key too, and
    for another account's principal that permission is on the key's policy."""
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    stack = cdk.Stack(app, "Keyed")
    LongJobProcessor(stack, "Jobs", infra={"kms_key": "create"}, producers=[iam.AccountPrincipal(PRODUCER_ACCOUNT)])
    granted = key_policy_grants(app.synth().get_stack_by_name("Keyed").template, PRODUCER_ACCOUNT)
    actions = {action for statement in granted for action in statement["Action"]}
    assert actions == {"kms:GenerateDataKey", "kms:Decrypt"}, granted


def key_policy_grants(template: dict[str, Any], account: str) -> list[dict[str, Any]]:
    """The statements of the template's key policies whose principal is `account`."""
    return [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::KMS::Key"
        for statement in resource["Properties"]["KeyPolicy"]["Statement"]
        if account in json.dumps(statement.get("Principal", {}))
    ]


def test_processor_producers_key_actions_are_the_ones_deploy_md_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """deploy.md's "Producers" lists the key actions a producer gets with `kms_key`, for a reviewer of its
    policy or of the key's: a role of the stack's account gets them on its own policy, another account on
    the key's."""
    page = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    listed = re.search(r"the grant includes the key \(([^)]*)\)", " ".join(page.split()))
    assert listed is not None, "deploy.md names the key actions of a producer"
    documented = set(re.findall(r"`(kms:[^`]+)`", listed[1]))
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    stack = cdk.Stack(app, "Keyed")
    role = iam.Role(stack, "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    producers = [role, iam.AccountPrincipal(PRODUCER_ACCOUNT)]
    LongJobProcessor(stack, "Jobs", infra={"kms_key": "create"}, producers=producers, nag=False)
    template = app.synth().get_stack_by_name("Keyed").template
    role_id = stack.resolve(stack.get_logical_id(cast(cdk.CfnElement, role.node.default_child)))
    own = [
        statement
        for resource in template["Resources"].values()
        if resource["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in resource["Properties"]["Roles"]
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]
    for granted in (own, key_policy_grants(template, PRODUCER_ACCOUNT)):
        actions = {action for statement in granted for action in statement["Action"] if action.startswith("kms:")}
        assert actions == documented, granted


def test_processor_producer_role_passes_the_apps_own_cdk_nag_with_kms_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """install.md's app runs cdk-nag's AwsSolutions pack on the whole app, so on a producer role of its own
    too. With `kms_key`, the key actions the construct writes into that role's policy name no wildcard
    (AwsSolutions-IAM5), so the synth passes with nothing for the user to acknowledge."""
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    stack = cdk.Stack(app, "Keyed")
    role = iam.Role(stack, "Producer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    processor = LongJobProcessor(stack, "Jobs", infra={"kms_key": "create"}, producers=[role])
    other = iam.Role(stack, "LaterProducer", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    processor.grant_send_jobs(other)
    app.synth()
    assert nag_violations(tmp_path / "cdk.out") == []


def test_processor_checks_itself_with_cdk_nag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path / "cdk.out"))
    stack = cdk.Stack(app, "Careless")
    processor = LongJobProcessor(stack, "Jobs", infra={"s3_notifications": False})
    sqs.Queue(processor, "Plain")  # inside its scope: no DLQ, no TLS-only policy
    sqs.Queue(stack, "Outside")  # outside it: the construct leaves the rest of the app to its owner
    with pytest.raises(RuntimeError, match="AwsSolutions-SQS3") as caught:
        app.synth()
    assert str(caught.value).count("AwsSolutions-SQS3") == 1, "only the queue in the processor's scope"


@pytest.mark.parametrize("fifo", [True, False])
def test_processor_warns_that_fifo_leaves_a_declared_limit_unenforced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fifo: bool
) -> None:
    """A FIFO queue has no admission (docs/fifo.md): a declared `max_concurrency` would be dropped in silence.
    `cdk synth` prints the warning; a standard queue enforces the limit and gets none."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "S")
    schema = {
        "type": "object",
        "required": ["seconds"],
        "properties": {"seconds": {"type": "integer", "minimum": 0, "maximum": 60}},
    }
    limited = {"name": "slow", "runner": "wait", "max_concurrency": 2, "params_schema": schema}
    LongJobProcessor(stack, "Jobs", job_types=[limited], engine={"fifo": fifo}, infra={"s3_notifications": False})

    warnings = Annotations.from_stack(stack).find_warning("*", Match.string_like_regexp("concurrency limit"))

    assert [w.entry.data for w in warnings] == (
        [
            "job types slow declare a concurrency limit (max_concurrency, or glue.max_concurrent_runs), which a "
            "FIFO queue does not enforce: a message group runs one job at a time, so bound how many run at once "
            "with groups (docs/fifo.md) [ack: longjobs:fifo-max-concurrency]"
        ]
        if fifo
        else []
    )


@pytest.mark.parametrize("notifications", [False, True])
def test_processor_without_the_builtins_has_no_default_trigger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, notifications: bool
) -> None:
    """The default trigger starts the built-in `spark`. Without the built-ins the catalog has no trigger,
    which is fine until S3 notifications are asked for: then no object could start a job, and the synth
    says so by the settings' names."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "S")
    seconds = {"type": "integer", "minimum": 0, "maximum": 60}
    schema = {"type": "object", "required": ["seconds"], "properties": {"seconds": seconds}}
    own = {"name": "pause", "runner": "wait", "params_schema": schema}
    infra = {"s3_notifications": notifications}
    if not notifications:
        processor = LongJobProcessor(stack, "Jobs", job_types=[own], include_builtin_job_types=False, infra=infra)
        assert processor.catalog.s3_triggers == () and processor.catalog.names == ["pause"]
        return
    with pytest.raises(ConfigError, match=r"s3_notifications: the job types have no s3_triggers"):
        LongJobProcessor(stack, "Jobs", job_types=[own], include_builtin_job_types=False, infra=infra)


def test_processor_refuses_a_bad_declaration_naming_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "S")
    bad = {**ROWS_TYPE, "params_schema": {"type": "object", "properties": {"input": {"type": "strnig"}}}}
    with pytest.raises(JobTypeError, match=r"job_types\[0\] 'rows': .*entry: cannot read.*rows.py") as caught:
        LongJobProcessor(stack, "Jobs", job_types=[bad])
    assert "params_schema: not a valid JSON Schema" in str(caught.value)
    with pytest.raises(ConfigError, match=r"engine\.queue_url is set by the processor itself"):
        LongJobProcessor(stack, "Jobs2", engine={"queue_url": "https://example.com/q"})
    with pytest.raises(TypeError, match=r"props: a LongJobProcessorProps, not a dict: pass the fields as keyword"):
        LongJobProcessor(stack, "Jobs3", cast(Any, {"job_types": [ROWS_TYPE]}))
    # The construct reads no CDK context: a bad setting is the props', and its error does not send the user to
    # cdk.json or `-c`.
    with pytest.raises(ConfigError, match=r"^invalid settings: receiver_max_concurrency='lots': Input should be"):
        LongJobProcessor(stack, "Jobs4", infra={"receiver_max_concurrency": "lots"})


def test_bundled_app_synth_fails_naming_a_bad_declaration(tmp_path: Path) -> None:
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"job_types": [{"name": "Bad Name", "runner": "pyspark"}]}))
    with pytest.raises(SystemExit) as caught:
        app_main(cdk.App(context={"jobs_file": str(jobs_file)}, outdir=str(tmp_path / "out")))
    message = str(caught.value.code)
    assert "jobs.json: invalid job types: job_types[0] 'Bad Name': name: String should match pattern" in message


def test_bundled_app_synth_fails_naming_two_types_that_would_share_an_output(tmp_path: Path) -> None:
    """The bundled stack names each Glue type's output `GlueJob` and its name without '-' and '_', case kept.
    `wordcount` and `word_count` pass the catalog's id check (`Wordcount`, `WordCount`) but share the output
    `GlueJobwordcount`: synth names both types instead of stopping in CDK with a traceback."""
    entry = str(Path(__file__).parents[2] / "jobs" / "wordcount.py") + ":run"
    declared = [{"name": name, "runner": "pyspark", "entry": entry} for name in ("wordcount", "word_count")]
    jobs_file = tmp_path / "jobs.json"
    jobs_file.write_text(json.dumps({"job_types": declared}))
    with pytest.raises(SystemExit) as caught:
        app_main(cdk.App(context={"jobs_file": str(jobs_file)}, outdir=str(tmp_path / "out")))
    message = str(caught.value.code)
    assert "'wordcount' and 'word_count' would both give the stack the output 'GlueJobwordcount'" in message
    assert "rename one of them" in message


def test_user_app_job_importing_a_module_that_would_not_ship_fails_synth_naming_it(tmp_path: Path) -> None:
    """The entry file ships alone: its `import helpers` would fail on Glue, at run time, with the
    processor retrying a job that can never succeed. Synth refuses it instead, naming the file, the
    line, the module and the fix."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "rows.py").write_text("import helpers\n" + SCRIPT)
    (tmp_path / "jobs" / "helpers.py").write_text("")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        stack = cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "UserStack")
        with pytest.raises(JobTypeError) as refused:
            LongJobProcessor(stack, "Jobs", job_types=[ROWS_TYPE])
        assert str(refused.value) == (
            f"job type 'rows': {tmp_path / 'jobs' / 'rows.py'}:1 imports 'helpers', which Glue 6.0 does not "
            "provide and the job does not ship: add its package to `requirements`, or set `code`"
        )
        fixed = {**ROWS_TYPE, "code": "jobs"}
        jobs = LongJobProcessor(cdk.Stack(cdk.App(outdir=str(tmp_path / "out2")), "Fixed"), "Jobs", job_types=[fixed])
        assert sorted(jobs.glue_jobs) == ["rows", "spark"], "with `code`, helpers.py ships beside the entry"


def test_user_app_requirement_pip_cannot_download_fails_synth_and_caches_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pinned version that does not exist (or no package index) stops synth with pip's reason and the
    command it ran; the wheel cache keeps no half-download that a later synth would trust."""
    monkeypatch.setenv("LONGJOBS_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "rows.py").write_text(SCRIPT)
    pinned = {**ROWS_TYPE, "requirements": ["Unidecode==9.9.9"]}
    with pytest.raises(JobTypeError) as refused:
        LongJobProcessor(cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "UserStack"), "Jobs", job_types=[pinned])
    message = str(refused.value)
    assert message.startswith(
        "job type 'rows': cannot download its requirements as wheels for Glue 6.0 (Python 3.13, manylinux2014_x86_64): "
    )
    assert "Unidecode==9.9.9" in message and "(ran: pip download " in message
    assert list((tmp_path / "cache" / "glue-wheels").iterdir()) == []


def test_user_app_type_may_pin_its_glue_version_and_its_imports_are_checked_for_it(tmp_path: Path) -> None:
    """The stack's Glue jobs run Glue 6.0 (Spark 4.1.1, Python 3.13) unless a type pins 5.0 or 5.1; each
    type's imports are checked against its own version's provided modules (orjson: 5.1 and later)."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "rows.py").write_text("import orjson\n" + SCRIPT)
    pinned = {**ROWS_TYPE, "glue": {**ROWS_TYPE["glue"], "version": "5.1"}}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        stack = cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "UserStack")
        jobs = LongJobProcessor(stack, "Jobs", job_types=[pinned])
        template = Template.from_stack(stack).to_json()
        with pytest.raises(JobTypeError, match=r"imports 'orjson', which Glue 5\.0 does not provide"):
            LongJobProcessor(
                cdk.Stack(cdk.App(outdir=str(tmp_path / "o2")), "Old"),
                "Jobs",
                job_types=[{**ROWS_TYPE, "glue": {**ROWS_TYPE["glue"], "version": "5.0"}}],
            )
    versions = {
        name: resource(stack, template, job)["Properties"]["GlueVersion"] for name, job in jobs.glue_jobs.items()
    }
    assert versions == {"rows": "5.1", "spark": "6.0"}


def test_processor_ids_of_each_type_are_the_ones_the_catalog_checks(tmp_path: Path) -> None:
    """The catalog refuses two types whose ids would meet (`longjobs.engine.jobs.names`) from the same ids the
    construct gives them: a type of each runner and platform, and one with requirements (its zip of wheels
    and the copy that names it for Glue), adds exactly its `generated_ids` to the stack. The requirement is
    jobs.json's, which the stack's tests download already (pip's cache keeps it)."""
    from longjobs.engine.jobs import load_catalog
    from longjobs.engine.jobs.names import EMR_SCOPE, WORKFLOW_SCOPE, generated_ids

    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "rows.py").write_text(SCRIPT)
    seconds = {"type": "integer", "minimum": 0, "maximum": 60}
    nap_schema = {"type": "object", "required": ["seconds"], "properties": {"seconds": seconds}}
    declared = [
        ROWS_TYPE,
        {**ROWS_TYPE, "name": "rows-emr", "platform": "emr_serverless", "glue": None},
        {**ROWS_TYPE, "name": "rows-wheels", "requirements": ["Unidecode==1.4.0"]},
        {"name": "nap-time", "runner": "wait", "params_schema": nap_schema},
        BATCH_TYPE,
    ]

    def ids(job_types: list[dict[str, Any]]) -> dict[str, set[str]]:
        stack = cdk.Stack(cdk.App(outdir=str(tmp_path / f"out{len(job_types)}")), "UserStack")
        workflow = LongJobProcessor(stack, "Jobs", job_types=job_types, nag=False).node.find_child("Workflow")
        emr = workflow.node.try_find_child("EmrServerless")
        return {
            WORKFLOW_SCOPE: {child.node.id for child in workflow.node.children},
            EMR_SCOPE: {child.node.id for child in emr.node.children} if emr is not None else set(),
        }

    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        builtins_only, every_kind = ids([]), ids(declared)
        catalog = load_catalog(job_types=declared, strict=True)
    shared = {WORKFLOW_SCOPE: {"EmrServerless", "EmrEntry"}, EMR_SCOPE: {"JobRole"}}  # made for the first EMR type
    for scope in (WORKFLOW_SCOPE, EMR_SCOPE):
        expected = {
            i for t in catalog if t.name not in ("spark", "wait", "echo") for i in generated_ids(t).get(scope, ())
        }
        assert every_kind[scope] - builtins_only[scope] - shared[scope] == expected, scope
        builtin_ids = {
            i for t in catalog if t.name in ("spark", "wait", "echo") for i in generated_ids(t).get(scope, ())
        }
        assert builtin_ids <= builtins_only[scope], scope


def test_processor_refuses_types_whose_ids_would_collide_before_cdk_does(tmp_path: Path) -> None:
    """`x`'s state RunXJob would be `run-x`'s Glue job: refused naming both types, not by CDK's "There is
    already a Construct with name 'RunXJob'"."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "rows.py").write_text(SCRIPT)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        stack = cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "UserStack")
        with pytest.raises(JobTypeError) as refused:
            LongJobProcessor(stack, "Jobs", job_types=[{**ROWS_TYPE, "name": "x"}, {**ROWS_TYPE, "name": "run-x"}])
    assert "job_types[1] 'run-x': name: 'x' and 'run-x' would both give the stack the id 'RunXJob'" in str(
        refused.value
    )


def test_processor_refuses_a_glue_types_limit_above_its_glue_jobs_concurrent_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "rows.py").write_text(SCRIPT)
    limited = {**ROWS_TYPE, "max_concurrency": 10, "glue": {**ROWS_TYPE["glue"], "max_concurrent_runs": 1}}
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "UserStack")
    with pytest.raises(
        ConfigError, match=r"'rows': max_concurrency=10 is more than its Glue job's max_concurrent_runs=1"
    ):
        LongJobProcessor(stack, "Jobs", job_types=[limited])


def test_user_app_glue_job_description_is_cut_to_glues_2048_bytes(tmp_path: Path) -> None:
    """Glue takes a description of at most 2048 UTF-8 bytes; a declaration's 1,024 characters may be 3,072."""
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "rows.py").write_text(SCRIPT)
    described = {**ROWS_TYPE, "description": "€" * 1_024}  # 3 bytes each
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        stack = cdk.Stack(cdk.App(outdir=str(tmp_path / "cdk.out")), "UserStack")
        jobs = LongJobProcessor(stack, "Jobs", job_types=[described], nag=False)
        template = Template.from_stack(stack).to_json()
    description = resource(stack, template, jobs.glue_jobs["rows"])["Properties"]["Description"]
    assert 2_040 < len(description.encode()) <= 2_048
    assert described["description"].startswith(description), "cut at a character's end, never inside one"


@pytest.mark.parametrize(
    ("stacks", "processor_id"),
    [
        ((("Data", "data-dev"), ("Data", "data-prod")), "Jobs"),  # one app, deployed under two stack names
        ((("LongJobs-qa-1", None), ("LongJobs-qa1", None)), "Default"),  # the bundled app's stages `qa-1`, `qa1`
    ],
)
def test_processor_metrics_service_apart_for_stacks_of_one_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stacks: tuple[tuple[str, str | None], ...], processor_id: str
) -> None:
    """Two stacks in one account and region have two stack names, whatever their ids in the app: each
    processor's functions publish under a `service` of their own (the one its alarms read), so one stack's
    lapses never page the other's topic."""
    monkeypatch.chdir(tmp_path)
    services = []
    for index, (construct_id, name) in enumerate(stacks):
        stack = cdk.Stack(cdk.App(outdir=str(tmp_path / f"out{index}")), construct_id, stack_name=name)
        processor = LongJobProcessor(stack, processor_id, infra={"s3_notifications": False}, nag=False)
        functions = Template.from_stack(stack).find_resources("AWS::Lambda::Function").values()
        variables = [f["Properties"].get("Environment", {}).get("Variables", {}) for f in functions]
        published = {v["POWERTOOLS_SERVICE_NAME"] for v in variables if "POWERTOOLS_SERVICE_NAME" in v}
        assert published == {processor.metrics_service}, published
        services.append(processor.metrics_service)
    assert services[0] != services[1], services


def test_processor_notification_filters_are_url_encoded_as_s3_requires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """S3 matches a notification filter against the key as the notification encodes it (a space as '+',
    other special characters URL-encoded), and the filter must be given so
    (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-how-to-filtering.html): a Hive-style
    prefix put as it is (`events/source=web/`) matches no marker, and no job ever starts."""
    monkeypatch.chdir(tmp_path)
    stack = cdk.Stack(cdk.App(outdir=str(tmp_path)), "S")
    seconds = {"type": "integer", "minimum": 0, "maximum": 60}
    schema = {"type": "object", "required": ["seconds"], "properties": {"seconds": seconds}}
    own = {"name": "pause", "runner": "wait", "params_schema": schema}
    trigger = {"prefix": "events/source=web/", "marker": "DONE flag", "job_type": "pause", "params": {"seconds": 1}}
    LongJobProcessor(stack, "Jobs", job_types=[own], s3_triggers=[trigger], infra={"s3_notifications": True}, nag=False)
    [notifications] = Template.from_stack(stack).find_resources("Custom::S3BucketNotifications").values()
    [config] = notifications["Properties"]["NotificationConfiguration"]["QueueConfigurations"]
    assert config["Filter"]["Key"]["FilterRules"] == [
        {"Name": "suffix", "Value": "DONE+flag"},
        {"Name": "prefix", "Value": "events/source%3Dweb/"},
    ]
