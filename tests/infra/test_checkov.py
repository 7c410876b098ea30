"""checkov on the synthesized templates: no finding but the suppressed ones, each with its reason.

checkov runs from its own environment (`make checkov-env`, pinned in the Makefile: its pins conflict with
the project's), once, on the three deployments the infra tests synthesize anyway. A check that does not
apply is suppressed on its resource (`Metadata.checkov.skip`, written by
`longjobs.construct.compliance.suppress_checkov` with the reason of `CHECKOV_REASONS`); docs/deploy.md
lists them. A new finding fails here, and so does a suppression not in these lists.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_sqs as sqs

from longjobs.construct.compliance import CHECKOV_ENCRYPTION_CHECKS, CHECKOV_REASONS, suppress_checkov
from tests import REPO_ROOT
from tests.infra.conftest import Synth

CHECKOV = REPO_ROOT / ".venv" / "checkov" / "bin" / "checkov"
"""Where `make checkov-env` installs checkov (the version the Makefile pins)."""

FUNCTIONS = ("Functions/Receiver", "Functions/Extender", "Functions/Watcher")
LOG_GROUPS = (
    "Functions/ReceiverLogs",
    "Functions/ExtenderLogs",
    "Functions/WatcherLogs",
    "Workflow/StateMachineLogs",
    "DeployCalls/Logs",
)
QUEUES = (
    "Queues/DeadLetterQueue",
    "Queues/JobsQueue",
    *(f"Queues/WaitingQueue-{name}" for name in ("echo", "spark", "textstats", "wait", "wordcount")),
)
NOTIFICATIONS_HANDLER = "BucketNotificationsHandler050a0587b7544547bf325f094a3db834"
COPY_HANDLER = "AWS679f53fac002430cb0da5b7982bd2287"
"""CDK's AwsCustomResource function: it publishes the job catalog and copies textstats' zip of wheels."""

CUSTOMER_KEY_SKIPS = {
    *(("CKV_AWS_116", name) for name in FUNCTIONS),
    *(("CKV_AWS_117", name) for name in FUNCTIONS),
    ("CKV_AWS_115", "Functions/Receiver"),  # with reserve_concurrency, the extender and the watcher have some
    ("CKV_AWS_18", "Workflow/Buckets/AccessLogs"),
    ("CKV_AWS_108", "Workflow/StateMachine/Role/DefaultPolicy"),
    *((check, COPY_HANDLER) for check in ("CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117")),
}
"""checkov's checks suppressed with the customer-managed key (`kms_key`) and `reserve_concurrency`: no
encryption check."""
DEFAULT_SKIPS = {
    *CUSTOMER_KEY_SKIPS,
    *(("CKV_AWS_27", name) for name in (*QUEUES, "Functions/WatcherFailures")),
    ("CKV_AWS_119", "Leases/Table"),
    *(("CKV_AWS_158", name) for name in LOG_GROUPS),
    *(("CKV_AWS_173", name) for name in FUNCTIONS),
    ("CKV_AWS_115", "Functions/Extender"),  # no reserved concurrency: a new account has none to spare
    ("CKV_AWS_115", "Functions/Watcher"),
}
"""checkov's checks suppressed in the default stack, by construct path under the processor."""
NOTIFICATIONS_SKIPS = {(check, NOTIFICATIONS_HANDLER) for check in ("CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117")}
"""CDK's bucket-notifications function, with `s3_notifications` (prod and cmk)."""


def declared_skips(synth: Synth) -> dict[tuple[str, str], str]:
    """(check, construct path under the processor, or under the stack for CDK's own) -> reason, from each
    resource's `Metadata.checkov.skip`."""
    return {
        (entry["id"], _path(construct)): entry["comment"]
        for construct in synth.stack.node.find_all()
        if isinstance(construct, cdk.CfnResource)
        for entry in (construct.get_metadata("checkov") or {}).get("skip", [])
    }


def _path(construct: cdk.CfnResource) -> str:
    return construct.node.path.split("/", 1)[1].removeprefix("Default/").removesuffix("/Resource")


@pytest.fixture(scope="module")
def checkov_report(dev: Synth, prod: Synth, cmk: Synth) -> Iterator[dict[str, Any]]:
    """One checkov run on the three templates (its start-up is most of its time)."""
    assert CHECKOV.exists(), f"checkov is missing: run `make checkov-env` (it installs {CHECKOV})"
    args = [str(CHECKOV), "--framework", "cloudformation", "--skip-download", "--output", "json"]
    for synth in (dev, prod, cmk):
        args += ["--file", str(synth.template_path)]
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, check=False, cwd=REPO_ROOT)
    assert result.stdout, result.stderr[-3000:]
    yield json.loads(result.stdout)


def test_checkov_suppressions_are_exactly_the_listed_ones(dev: Synth, prod: Synth, cmk: Synth) -> None:
    handler = NOTIFICATIONS_SKIPS
    assert set(declared_skips(dev)) == DEFAULT_SKIPS
    assert set(declared_skips(prod)) == CUSTOMER_KEY_SKIPS | handler, "prod imports its key by ARN"
    assert set(declared_skips(cmk)) == CUSTOMER_KEY_SKIPS | handler
    for synth in (dev, prod, cmk):
        for (check, _), reason in declared_skips(synth).items():
            assert reason == CHECKOV_REASONS[check]


def test_checkov_customer_managed_key_variants_suppress_no_checkov_encryption_check(prod: Synth, cmk: Synth) -> None:
    for synth in (prod, cmk):
        assert {check for check, _ in declared_skips(synth)} & CHECKOV_ENCRYPTION_CHECKS == set()


def test_checkov_finds_nothing_but_the_suppressed_checks(
    checkov_report: dict[str, Any], dev: Synth, prod: Synth, cmk: Synth
) -> None:
    results = checkov_report["results"]
    failed = [f"{c['check_id']} {c['resource']} ({c['file_path']})" for c in results["failed_checks"]]
    assert failed == []
    assert checkov_report["summary"]["parsing_errors"] == 0
    assert checkov_report["summary"]["passed"] > 0
    for synth in (dev, prod, cmk):
        reported = {
            (check["check_id"], check["resource"].split(".", 1)[1], check["check_result"].get("suppress_comment"))
            for check in results["skipped_checks"]
            if Path(check["file_abs_path"]) == synth.template_path
        }
        declared = {
            (entry["id"], logical_id, entry["comment"])
            for logical_id, resource in synth.resources.items()
            for entry in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
        }
        assert reported == declared, "checkov honours each suppression, with its reason"


def test_checkov_suppression_needs_a_recorded_reason() -> None:
    queue = sqs.Queue(cdk.Stack(cdk.App()), "Queue")
    with pytest.raises(ValueError, match="no reason recorded for checkov check"):
        suppress_checkov(queue, "CKV_AWS_26")
