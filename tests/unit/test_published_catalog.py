"""The job catalog a deployment publishes in its lease table (`longjobs.engine.jobs.published`)."""

from __future__ import annotations

import json

import pytest

from longjobs.engine.delivery.models import BadInput, ErrorType, parse_body
from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog, JobType
from longjobs.engine.jobs.published import (
    CATALOG_KEY,
    CHECKED_SETTINGS,
    ITEM_MAX_BYTES,
    catalog_item,
    checks_of,
    receiver_checks,
)
from longjobs.engine.lease import is_lease_key, job_lock_key
from longjobs.engine.settings import Settings


def test_published_catalog_item_is_the_catalogs_json_under_its_own_key() -> None:
    catalog = JobCatalog(BUILTIN_TYPES)
    item = catalog_item(catalog, source="stack LongJobs-dev")
    assert item["pk"] == {"S": CATALOG_KEY} and item["published_by"] == {"S": "stack LongJobs-dev"}
    assert json.loads(item["job_types"]["S"]) == catalog.to_data()
    assert set(item) == {"pk", "job_types", "published_by"}, "no status, no index key: no lease query meets it"


def test_published_catalog_item_carries_the_settings_the_receiver_checks_bodies_with() -> None:
    """A `wait` must end within renewal, which the deployment's `max_renewal_s` sets: `submit` checks with
    the receiver's, not the defaults."""
    settings = Settings(max_renewal_s=3_600, cap_safety_s=120)
    checks = receiver_checks(settings)
    assert checks == {"max_renewal_s": 3_600, "cap_safety_s": 120, "max_body_bytes": 65_536}
    assert set(checks) == set(CHECKED_SETTINGS)
    assert (
        receiver_checks(Settings(policy="remaining", visibility_timeout_s=30, extender_period_s=1))["max_renewal_s"]
        == 300
    )
    item = catalog_item(JobCatalog(BUILTIN_TYPES), source="stack X", checks=checks)
    assert json.loads(item["receiver_checks"]["S"]) == checks
    assert Settings(**checks).renewal_s == settings.renewal_s, "what submit rebuilds is the receiver's renewal"


def test_published_catalog_past_a_dynamodb_item_is_refused_naming_the_limit() -> None:
    huge = JobType.model_validate(
        {"name": "huge", "runner": "pyspark", "entry": "a.py:run", "description": "x" * 1_000,
         "params_schema": {"type": "object", "properties": {f"p{n}": {"type": "string", "description": "y" * 500}
                                                            for n in range(900)}}}
    )  # fmt: skip
    with pytest.raises(ValueError, match=f"more than a DynamoDB item holds \\({ITEM_MAX_BYTES} bytes"):
        catalog_item(JobCatalog([*BUILTIN_TYPES, huge]), source="stack X")


@pytest.mark.parametrize(
    ("key", "lease"),
    [("0f9c7e1c-6d53-4d0c-9b2d-1d2f3a4b5c6d", True), (job_lock_key("j-1"), False), ("slot#spark#0", False),
     (CATALOG_KEY, False)],
)  # fmt: skip
def test_published_catalog_key_is_not_a_lease_key(key: str, lease: bool) -> None:
    assert is_lease_key(key) is lease


def test_published_catalog_checks_carry_every_setting_the_body_parse_reads() -> None:
    """`submit` rebuilds the receiver's settings from the published checks: a body past the deployment's
    `max_body_bytes` is TooLarge to both, not sent to be dead-lettered."""
    deployed = Settings(max_body_bytes=300)
    body = json.dumps({"job_id": "j", "type": "echo", "params": {"text": "x" * 400}})
    rebuilt = Settings(**receiver_checks(deployed))
    for settings in (deployed, rebuilt):
        with pytest.raises(BadInput) as refused:
            parse_body(body, settings, JobCatalog(BUILTIN_TYPES))
        assert refused.value.error_type == ErrorType.TOO_LARGE


@pytest.mark.parametrize(
    "attribute",
    [{"S": "not json"}, {"S": "[1]"}, {"S": "null"}, {"M": {}}, {"S": '{"max_renewal_s": true}'}],
    ids=["not-json", "a-list", "null", "a-map", "a-bool"],
)
def test_published_catalog_checks_edited_into_no_object_of_numbers_are_a_value_error(
    attribute: dict[str, object],
) -> None:
    with pytest.raises(ValueError, match="receiver_checks is no JSON object of the receiver's settings"):
        checks_of({"receiver_checks": attribute})
    assert checks_of({}) == {}
    assert checks_of({"receiver_checks": {"S": '{"max_renewal_s": 600, "newer": "x"}'}}) == {"max_renewal_s": 600}


def test_published_catalog_checks_carry_the_bucket_locations_a_default_is_filled_from() -> None:
    """The stack's bucket URIs are CDK tokens its settings do not hold: they come as `locations`. A bucket
    the receiver does not have is left out, so `submit` refuses what a default of it would fill."""
    settings = Settings(curated_uri="s3://curated/")
    checks = receiver_checks(settings, {"raw_uri": "s3://raw/"})
    assert (checks["curated_uri"], checks["raw_uri"]) == ("s3://curated/", "s3://raw/")
    assert "quarantine_uri" not in checks
    assert Settings(**checks).locations == {"curated": "s3://curated/", "quarantine": None, "raw": "s3://raw/"}
    item = catalog_item(JobCatalog(BUILTIN_TYPES), source="stack X", checks=checks)
    assert checks_of(item) == checks
    with pytest.raises(ValueError, match="receiver_checks is no JSON object"):
        checks_of({"receiver_checks": {"S": '{"raw_uri": 5}'}})
