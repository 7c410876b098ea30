"""The job catalog a deployment publishes in its lease table (`longjobs.engine.jobs.published`)."""

from __future__ import annotations

import json

import pytest

from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog, JobType
from longjobs.engine.jobs.published import CATALOG_KEY, CHECKED_SETTINGS, ITEM_MAX_BYTES, catalog_item, receiver_checks
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
    assert checks == {"max_renewal_s": 3_600, "cap_safety_s": 120} and set(checks) == set(CHECKED_SETTINGS)
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
