"""cdk-nag, cfn-lint and the pinned CDK command line, on the synthesized stack."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_sqs as sqs
from cdk_nag import AwsSolutionsChecks
from cfnlint.api import ManualArgs, lint_file

import app
from longjobs.construct.compliance import GUARD_ENCRYPTION_RULES, GUARD_REASONS, suppress_guard
from longjobs.construct.nag import acknowledge
from tests import REPO_ROOT
from tests.infra.conftest import Synth, cdk_json_context, cli_env, working_copy
from tests.infra.test_checkov import CHECKOV, FUNCTIONS, LOG_GROUPS
from tests.infra.test_checkov import COPY_HANDLER as COPY_FUNCTION

CDK_CLI = REPO_ROOT / "node_modules" / ".bin" / "cdk"
CFN_LINT_ACCEPTED = {
    # CDK adds DependsOn on a role's default policy next to the GetAtt of the role itself: redundant, harmless.
    "W3005",
}


def nag_violations(outdir: Path) -> list[dict[str, Any]]:
    """Violations in the cloud assembly's policy-validation report (no report: none ran or none found)."""
    report = outdir / "validation-report.json"
    if not report.exists():
        return []
    return [
        violation for plugin in json.loads(report.read_text())["pluginReports"] for violation in plugin["violations"]
    ]


def test_nag_finds_nothing_unacknowledged_in_either_deployment(dev: Synth, prod: Synth) -> None:
    # The fixtures' synth raises on any unacknowledged finding; the report must be empty too.
    assert nag_violations(dev.outdir) == []
    assert nag_violations(prod.outdir) == []


def _nag_app(tmp_path: Path) -> tuple[cdk.App, cdk.Stack]:
    app = cdk.App(outdir=str(tmp_path))
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, cdk.Stack(app, "NagProbe")


def test_nag_fails_the_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    app, stack = _nag_app(tmp_path)
    sqs.Queue(stack, "Plain")  # no DLQ, no TLS-only policy
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    rules = {violation["ruleName"] for violation in nag_violations(tmp_path)}
    assert {"AwsSolutions-SQS3", "AwsSolutions-SQS4"} <= rules


def test_nag_acknowledges_only_the_named_findings(tmp_path: Path) -> None:
    app, stack = _nag_app(tmp_path)
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    role.add_to_policy(iam.PolicyStatement(actions=["xray:PutTraceSegments"], resources=["*"]))
    role.add_to_policy(iam.PolicyStatement(actions=["s3:Get*"], resources=["arn:aws:s3:::bucket/key"]))
    acknowledge(role, "AwsSolutions-IAM5", "X-Ray takes no resource ARN", findings=("Resource::*",))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    assert {violation["ruleName"] for violation in nag_violations(tmp_path)} == {"AwsSolutions-IAM5[Action::s3:Get*]"}


@pytest.mark.parametrize("deployment", ["dev", "prod", "cmk"])
def test_cfn_lint_finds_no_errors(deployment: str, request: pytest.FixtureRequest) -> None:
    synth: Synth = request.getfixturevalue(deployment)
    template = synth.outdir / synth.stack.template_file
    matches = lint_file(template, config=ManualArgs(regions=["us-east-1", "eu-west-1"]))
    problems = [f"{m.rule.id} {m.message} ({m.path})" for m in matches if m.rule.id not in CFN_LINT_ACCEPTED]
    assert problems == []


def npx_cdk_synth(tmp_path: Path, *context: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`npx cdk synth [-c key=value ...]` exactly as the README runs it: from the repository's root, with the
    CLI that package.json pins and its default output folder, the relative `cdk.out`."""
    assert CDK_CLI.exists(), "the pinned CDK command line is missing: run `npm ci` (make install does)"
    root = working_copy(tmp_path / "clone")
    args = ["npx", "cdk", "synth"]
    for item in context:
        args += ["-c", item]
    done = subprocess.run(
        args, cwd=root, env=cli_env(tmp_path), capture_output=True, text=True, timeout=300, check=False
    )
    return root, done


@pytest.mark.parametrize("context", [(), ("kms_key=create",)], ids=["default", "kms_key=create"])
def test_cdk_cli_synth_succeeds_as_the_readme_runs_it(context: tuple[str, ...], tmp_path: Path) -> None:
    """Every policy gate passes on the CLI's own output folder, and `make checkov`'s command passes on it."""
    root, result = npx_cdk_synth(tmp_path, *context)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "finished with errors" not in result.stdout + result.stderr
    assert "end-of-life" not in result.stderr and "b'!!" not in result.stderr, "jsii's Node notices stay quiet"
    outdir = root / "cdk.out"
    template = json.loads((outdir / "LongJobs-dev.template.json").read_text())
    assert template["Outputs"]["DashboardName"]["Value"] == "LongJobs-dev"
    assert nag_violations(outdir) == []
    if not context:
        checkov = [str(CHECKOV), "--directory", "cdk.out", "--framework", "cloudformation", "--skip-download"]
        scanned = subprocess.run(
            [*checkov, "--compact"], cwd=root, capture_output=True, text=True, timeout=300, check=False
        )
        assert scanned.returncode == 0, scanned.stdout[-3000:] + scanned.stderr[-3000:]


GUARD_PROBE = """
import sys

from longjobs.construct import quiet_node_notices

quiet_node_notices()

import aws_cdk as cdk
from aws_cdk import aws_logs as logs

from longjobs.construct.compliance import ControlTowerChecks, suppress_guard

app = cdk.App()  # its output folder from CDK_OUTDIR, as the CDK command line hands it over
group = logs.LogGroup(cdk.Stack(app, "GuardProbe"), "Logs", retention=logs.RetentionDays.ONE_YEAR)
if sys.argv[1:]:
    suppress_guard(group, *sys.argv[1:])
cdk.Validations.of(app).add_plugins(ControlTowerChecks())
app.synth()
"""
"""An app whose one resource, a log group kept a year, breaks one Control Tower rule: encryption with a
customer-managed key."""


def test_stack_control_tower_checks_honour_suppressions_with_a_relative_outdir(tmp_path: Path) -> None:
    """The CDK command line runs the app with a relative output folder (`CDK_OUTDIR=cdk.out`): a suppressed
    rule stays suppressed there, and one left unsuppressed still fails the synth."""
    (tmp_path / "probe.py").write_text(GUARD_PROBE)
    env = {**cli_env(tmp_path), "CDK_OUTDIR": "cdk.out", "PYTHONPATH": str(REPO_ROOT)}

    def synth(*suppressed: str) -> subprocess.CompletedProcess[str]:
        args = [sys.executable, "probe.py", *suppressed]
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)

    suppressed = synth("cloudwatch_log_group_encrypted_check")
    assert suppressed.returncode == 0, suppressed.stderr[-3000:]
    assert nag_violations(tmp_path / "cdk.out") == []

    unsuppressed = synth()
    assert unsuppressed.returncode != 0 and "CT.CLOUDWATCH.PR.3" in unsuppressed.stderr, unsuppressed.stderr[-3000:]
    violations = nag_violations(tmp_path / "cdk.out")
    assert [violation["ruleName"] for violation in violations] == ["cloudwatch_log_group_encrypted_check"]


def test_cdk_app_fails_naming_a_bad_context_value(tmp_path: Path) -> None:
    """What `cdk synth -c glue_workers=1` runs (app.py's main, whose exit message the CLI prints), in
    process: the CLI itself is run by the test above."""
    bad = cdk.App(context={**cdk_json_context(), "glue_workers": "1"}, outdir=str(tmp_path))
    with pytest.raises(SystemExit) as exited:
        app.main(bad)
    assert "glue_workers='1'" in str(exited.value.code)


BUCKETS = ("AccessLogs", "Raw", "Curated", "Quarantine", "Glue")
COPY_HANDLER = f"{COPY_FUNCTION}/Resource"
"""CDK's AwsCustomResource function, at the stack's root: the deploy's calls (`DeployCalls`)."""
CUSTOMER_KEY_SUPPRESSIONS = {
    *(("lambda_inside_vpc_check", f"Default/{name}/Resource") for name in FUNCTIONS),
    ("lambda_inside_vpc_check", COPY_HANDLER),
    *(
        (rule, f"Default/Workflow/Buckets/{name}/Resource")
        for rule in ("s3_bucket_object_lock_enabled_check", "s3_event_notifications_enabled_check")
        for name in BUCKETS
    ),
    ("s3_bucket_logging_enabled_check", "Default/Workflow/Buckets/AccessLogs/Resource"),
}
"""The Control Tower rules suppressed with the customer-managed key (`kms_key`): no encryption rule."""
DEFAULT_SUPPRESSIONS = {
    *CUSTOMER_KEY_SUPPRESSIONS,
    *(("cloudwatch_log_group_encrypted_check", f"Default/{name}/Resource") for name in LOG_GROUPS),
    ("dynamodb_table_encrypted_kms_check", "Default/Leases/Table/Resource"),
    *(("s3_bucket_default_encryption_kms_check", f"Default/Workflow/Buckets/{name}/Resource") for name in BUCKETS),
}
"""The Control Tower rules suppressed in the default stack, each on its resource (docs/deploy.md lists them
with their reasons, `longjobs.construct.compliance.GUARD_REASONS`)."""
NOTIFICATIONS_HANDLER = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834/Resource"
"""CDK's bucket-notifications function (with `s3_notifications`), at the stack's root."""


def guard_suppressions(synth: Synth) -> set[tuple[str, str]]:
    return {
        (rule, construct.node.path.split("/", 1)[1])
        for construct in synth.stack.node.find_all()
        if isinstance(construct, cdk.CfnResource)
        for rule in (construct.get_metadata("guard") or {}).get("SuppressedRules", [])
    }


def test_stack_control_tower_rules_pass_with_exactly_the_listed_suppressions(
    dev: Synth, prod: Synth, cmk: Synth
) -> None:
    """cdk synth runs AWS Control Tower's proactive controls (cfn-guard, `ControlTowerChecks`) beside
    cdk-nag: the fixtures' synth raises on any finding left, and the reports hold none. A new finding
    fails here; so does a suppression not in these lists."""
    for synth in (dev, prod, cmk):
        assert nag_violations(synth.outdir) == []
    assert guard_suppressions(dev) == DEFAULT_SUPPRESSIONS
    prod_only = {
        *(("cloudwatch_log_group_retention_period_check", f"Default/{name}/Resource") for name in LOG_GROUPS),
        ("step_functions_state_machine_tracing_enabled_check", "Default/Workflow/StateMachine/Resource"),
    }
    handler = {("lambda_inside_vpc_check", NOTIFICATIONS_HANDLER)}
    assert guard_suppressions(prod) == CUSTOMER_KEY_SUPPRESSIONS | prod_only | handler, (
        "prod imports its key, chose log_retention_days=90 and tracing=false; s3_notifications adds CDK's "
        "notifications function"
    )
    assert guard_suppressions(cmk) == CUSTOMER_KEY_SUPPRESSIONS | handler
    for rule, _ in guard_suppressions(dev) | guard_suppressions(prod):
        assert GUARD_REASONS[rule], rule


def test_stack_customer_managed_key_variants_suppress_no_control_tower_encryption_rule(prod: Synth, cmk: Synth) -> None:
    """With `kms_key` (created, or imported in prod) every encryption rule passes on its own merits."""
    for synth in (prod, cmk):
        assert {rule for rule, _ in guard_suppressions(synth)} & GUARD_ENCRYPTION_RULES == set()


def test_stack_control_tower_suppression_needs_a_recorded_reason() -> None:
    stack = cdk.Stack(cdk.App())
    queue = sqs.Queue(stack, "Queue")
    with pytest.raises(ValueError, match="no reason recorded for cfn-guard rule"):
        suppress_guard(queue, "sqs_dlq_check")
