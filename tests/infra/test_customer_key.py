"""The `kms_key` setting: one customer-managed key for everything the processor stores.

Three deployments: `dev` (unset: each service's own encryption, as a fresh account needs), `cmk` (the
processor creates the key, with its key policy) and `prod` (a key imported by ARN, whose policy stays its
owner's).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from longjobs.construct.config import ConfigError, load_config
from longjobs.construct.keys import KEY_USER_ACTIONS, LOGS_KEY_ACTIONS
from tests import REPO_ROOT
from tests.infra.conftest import PROD_CONTEXT, Synth

IMPORTED_KEY = PROD_CONTEXT["kms_key"]
LOG_PREFIX = "/longjobs/LongJobs-dev/LongJobsdev"
"""The created-key stack's log-group prefix: the stack's name and the processor's unique id."""


def key_reference(synth: Synth) -> Any:
    """How the template names the processor's key: the created key's ARN, or the imported ARN."""
    if synth.stack.processor.config.infra.kms_key == "create":
        [logical_id] = synth.of_type("AWS::KMS::Key")
        return {"Fn::GetAtt": [logical_id, "Arn"]}
    return IMPORTED_KEY


@pytest.mark.parametrize("value", ["create", IMPORTED_KEY, "arn:aws:kms:eu-west-1:111122223333:key/mrk-" + "0" * 32])
def test_kms_key_is_create_or_a_key_arn(value: str) -> None:
    assert load_config({"kms_key": value}).infra.kms_key == value


@pytest.mark.parametrize("value", ["alias/long-jobs", "arn:aws:kms:us-east-1:111122223333:alias/long-jobs", "yes"])
def test_kms_key_refuses_an_alias_or_anything_else_naming_the_key(value: str) -> None:
    with pytest.raises(ConfigError, match=r"kms_key=.*must be 'create' or a KMS key ARN"):
        load_config({"kms_key": value})


def test_customer_key_default_stack_keeps_each_services_own_encryption(dev: Synth) -> None:
    """Unset, nothing needs a key policy: deployable in a fresh account as before."""
    assert len(dev.of_type("AWS::KMS::Key")) == 2, "only the Glue key and the alarm topic's key, as before"
    for queue in dev.of_type("AWS::SQS::Queue").values():
        assert queue["Properties"]["SqsManagedSseEnabled"] is True and "KmsMasterKeyId" not in queue["Properties"]
    [table] = dev.of_type("AWS::DynamoDB::Table").values()
    assert "SSESpecification" not in table["Properties"]
    for log_group in dev.of_type("AWS::Logs::LogGroup").values():
        assert "KmsKeyId" not in log_group["Properties"] and "LogGroupName" not in log_group["Properties"]
    for function in dev.of_type("AWS::Lambda::Function").values():
        assert "KmsKeyArn" not in function["Properties"]
    [machine] = dev.of_type("AWS::StepFunctions::StateMachine").values()
    assert "EncryptionConfiguration" not in machine["Properties"]


@pytest.mark.parametrize("deployment", ["cmk", "prod"])
def test_customer_key_customer_managed_key_encrypts_every_store(
    deployment: str, request: pytest.FixtureRequest
) -> None:
    synth: Synth = request.getfixturevalue(deployment)
    key = key_reference(synth)
    queues = synth.of_type("AWS::SQS::Queue")
    types = len(list(synth.stack.processor.catalog))
    assert len(queues) == 3 + types, "jobs, DLQ, a waiting queue per job type and the watcher's failures"
    for queue in queues.values():
        assert queue["Properties"]["KmsMasterKeyId"] == key and "SqsManagedSseEnabled" not in queue["Properties"]
    [table] = synth.of_type("AWS::DynamoDB::Table").values()
    assert table["Properties"]["SSESpecification"] == {"KMSMasterKeyId": key, "SSEEnabled": True, "SSEType": "KMS"}
    log_groups = synth.of_type("AWS::Logs::LogGroup")
    assert len(log_groups) == 5, "the three functions', the state machine's and the deploy calls'"
    for log_group in log_groups.values():
        assert log_group["Properties"]["KmsKeyId"] == key
    buckets = synth.of_type("AWS::S3::Bucket")
    assert len(buckets) == 5
    for bucket in buckets.values():
        by_default = {"KMSMasterKeyID": key, "SSEAlgorithm": "aws:kms"}
        assert bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"] == [
            {"BucketKeyEnabled": True, "ServerSideEncryptionByDefault": by_default}
        ], "the access-log bucket too: S3 server access logging delivers to a customer-managed key"
    [machine] = synth.of_type("AWS::StepFunctions::StateMachine").values()
    assert machine["Properties"]["EncryptionConfiguration"] == {
        "KmsDataKeyReusePeriodSeconds": 300,
        "KmsKeyId": key,
        "Type": "CUSTOMER_MANAGED_KMS_KEY",
    }
    [security] = synth.of_type("AWS::Glue::SecurityConfiguration").values()
    assert security["Properties"]["EncryptionConfiguration"] == {
        "CloudWatchEncryption": {"CloudWatchEncryptionMode": "SSE-KMS", "KmsKeyArn": key},
        "JobBookmarksEncryption": {"JobBookmarksEncryptionMode": "CSE-KMS", "KmsKeyArn": key},
        "S3Encryptions": [{"KmsKeyArn": key, "S3EncryptionMode": "SSE-KMS"}],
    }
    functions = synth.part("Functions")
    for function in (functions.receiver, functions.extender, functions.watcher):
        assert synth.resource(function)["Properties"]["KmsKeyArn"] == key, "the environment too"
    [topic] = synth.of_type("AWS::SNS::Topic").values()
    assert topic["Properties"]["KmsMasterKeyId"] == key


def test_customer_key_deploy_page_counts_and_names_every_log_group_it_encrypts(cmk: Synth) -> None:
    """docs/deploy.md's list of what the key encrypts counts the stack's log groups, and its naming pattern
    covers each name: an operator looks for them in the console by that page."""
    page = (REPO_ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    counted = re.search(r"^- the (\w+) log groups\b", page, re.M)
    assert counted is not None
    numbers = {"three": 3, "four": 4, "five": 5, "six": 6}
    log_groups = cmk.of_type("AWS::Logs::LogGroup")
    assert numbers.get(counted.group(1)) == len(log_groups)
    named = re.search(r"the log groups are named\s+`/longjobs/<stack name>/<processor's unique id>/<([^>]+)>`", page)
    assert named is not None
    leaves = set(re.split(r", | or ", named.group(1).replace("function", "receiver, extender, watcher")))
    names = {group["Properties"]["LogGroupName"] for group in log_groups.values()}
    assert names == {f"{LOG_PREFIX}/{leaf}" for leaf in leaves}


def test_customer_key_created_key_is_the_only_key_rotated_and_kept(cmk: Synth) -> None:
    [key] = cmk.of_type("AWS::KMS::Key").values()
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain", "data encrypted with it outlives the stack (the buckets are retained)"


def test_customer_key_imported_key_is_used_as_given_and_no_key_is_created(prod: Synth) -> None:
    assert prod.of_type("AWS::KMS::Key") == {}


def test_customer_key_a_change_of_kms_key_names_a_new_glue_security_configuration(dev: Synth, cmk: Synth) -> None:
    """Glue cannot update a security configuration (its CloudFormation type has no update handler, so a change
    replaces it), and CloudFormation refuses to replace a resource of a fixed name: setting, changing or
    removing `kms_key` on a deployed stack would fail its deploy if the name stayed. Not retained either, so a
    return to an earlier setting, or a deploy after `cdk destroy`, does not find its name taken."""
    [(dev_id, plain)] = dev.of_type("AWS::Glue::SecurityConfiguration").items()
    [(cmk_id, keyed)] = cmk.of_type("AWS::Glue::SecurityConfiguration").items()
    assert dev_id == cmk_id, "one resource, replaced"
    assert plain["Properties"]["Name"] != keyed["Properties"]["Name"]
    assert plain["Properties"]["Name"] == "LongJobsdevWorkflowGlueSecurity56FBA2D8", "unchanged without kms_key"
    for security in (plain, keyed):
        assert security["DeletionPolicy"] == security["UpdateReplacePolicy"] == "Delete"


@pytest.mark.parametrize("setting", ["create", IMPORTED_KEY])
def test_customer_key_each_key_setting_names_its_own_glue_security_configuration(
    setting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aws_cdk as cdk

    from longjobs.construct import LongJobProcessor

    monkeypatch.chdir(tmp_path)
    names = set()
    for value in (setting, "arn:aws:kms:us-east-1:111122223333:key/" + "0" * 8 + "-0000-0000-0000-" + "0" * 12):
        app = cdk.App(outdir=str(tmp_path))
        stack = cdk.Stack(app, "Data", env=cdk.Environment(account="111122223333", region="us-east-1"))
        LongJobProcessor(stack, "Jobs", infra={"kms_key": value}, nag=False)
        template = app.synth().get_stack_by_name("Data").template
        [security] = [r for r in template["Resources"].values() if r["Type"] == "AWS::Glue::SecurityConfiguration"]
        names.add(security["Properties"]["Name"])
    assert len(names) == 2, "another key, another name"


def test_customer_key_in_another_region_than_the_stack_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQS, DynamoDB, CloudWatch Logs, S3 and the others take a key of their own region only: the deploy would
    fail resource by resource, naming no setting."""
    import aws_cdk as cdk

    from longjobs.construct import LongJobProcessor

    monkeypatch.chdir(tmp_path)
    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "Data", env=cdk.Environment(account="111122223333", region="us-east-1"))
    key = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    refused = "kms_key: the key is in region eu-west-1, the processor's stack in us-east-1"
    with pytest.raises(ConfigError, match=refused):
        LongJobProcessor(stack, "Jobs", infra={"kms_key": key}, nag=False)


def _principal(statement: dict[str, Any]) -> str:
    principal = statement["Principal"]
    value = principal.get("Service") or principal.get("AWS")
    if isinstance(value, dict):  # logs.<region>.amazonaws.com, or the account's root
        return "logs.<region>" if "logs." in str(value) else "account root"
    return str(value)


def _actions(statement: dict[str, Any]) -> tuple[str, ...]:
    actions = statement["Action"]
    return tuple(sorted([actions] if isinstance(actions, str) else actions))


def test_customer_key_created_key_policy_lets_each_service_do_only_what_it_needs(cmk: Synth) -> None:
    [key] = cmk.of_type("AWS::KMS::Key").values()
    statements = key["Properties"]["KeyPolicy"]["Statement"]
    summary = {
        (statement["Effect"], _principal(statement), _actions(statement), tuple(sorted(statement.get("Condition", {}))))
        for statement in statements
    }
    assert summary == {
        # CDK's default: the account manages the key, and its roles use it through IAM policies.
        ("Allow", "account root", ("kms:*",), ()),
        # CT.KMS.PR.3: grants only for AWS resources (DynamoDB, Lambda, Glue create theirs).
        ("Deny", "*", ("kms:CreateGrant",), ("BoolIfExists",)),
        # CloudWatch Logs, for the processor's log groups and the Glue jobs' only (next test).
        ("Allow", "logs.<region>", tuple(sorted(LOGS_KEY_ACTIONS)), ("ArnLike",)),
        # CloudWatch alarms publish to the encrypted topic.
        ("Allow", "cloudwatch.amazonaws.com", ("kms:Decrypt", "kms:GenerateDataKey*"), ()),
        # S3 notifications of the raw bucket to the encrypted jobs queue (s3_notifications).
        ("Allow", "s3.amazonaws.com", ("kms:Decrypt", "kms:GenerateDataKey"), ()),
        # CDK's grant when the access-log bucket is encrypted with the key: S3's log delivery writes there.
        (
            "Allow",
            "logging.s3.amazonaws.com",
            ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*"),
            (),
        ),
        # CDK's grant for the state machine's log delivery, when the execution data is encrypted.
        ("Allow", "delivery.logs.amazonaws.com", ("kms:Decrypt*",), ()),
    }
    assert len(statements) == len(summary)
    [deny] = [statement for statement in statements if statement["Effect"] == "Deny"]
    assert deny["Condition"] == {
        "BoolIfExists": {"kms:GrantIsForAWSResource": "false", "aws:PrincipalIsAWSService": "false"}
    }


def test_customer_key_created_key_lets_cloudwatch_logs_encrypt_the_processors_log_groups_only(cmk: Synth) -> None:
    names = sorted(group["Properties"]["LogGroupName"] for group in cmk.of_type("AWS::Logs::LogGroup").values())
    assert names == [
        f"{LOG_PREFIX}/{name}" for name in ("deploy-calls", "extender", "receiver", "state-machine", "watcher")
    ]
    [key] = cmk.of_type("AWS::KMS::Key").values()
    [logs] = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if _principal(s) == "logs.<region>"]
    patterns = [
        "".join(part if isinstance(part, str) else "<" + part["Ref"] + ">" for part in arn["Fn::Join"][1])
        for arn in logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    ]
    account_logs = "arn:<AWS::Partition>:logs:<AWS::Region>:<AWS::AccountId>:log-group:"
    assert patterns == [f"{account_logs}{LOG_PREFIX}/*", f"{account_logs}/aws-glue/*"]


@pytest.mark.parametrize("deployment", ["cmk", "prod"])
def test_roles_may_use_the_key_on_that_key_only(deployment: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(deployment)
    key = key_reference(synth)
    functions = synth.part("Functions")
    roles = [functions.receiver.role, functions.extender.role, functions.watcher.role]
    roles.append(synth.part("Workflow").state_machine.role)
    for role in map(synth.logical_id, roles):
        [policy] = [p for p in synth.of_type("AWS::IAM::Policy").values() if {"Ref": role} in p["Properties"]["Roles"]]
        on_key = {
            action
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
            if statement["Resource"] == key
            for action in _actions(statement)
        }
        assert set(KEY_USER_ACTIONS) <= on_key, role
        assert all(action.startswith("kms:") for action in on_key), "nothing but KMS on the key"
