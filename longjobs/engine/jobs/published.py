"""The job catalog a deployment publishes, so the operator's command validates against what runs.

The stack writes its catalog into the lease table when it deploys (a CDK custom resource's PutItem),
and the offline runtime (`serve`, a scenario's run) writes its own when it starts: one item, key
`meta#job-types`, the catalog's JSON in `job_types`. `longjobs submit` and `top` read it with one
GetItem, the access they already need to the table, and name where it came from in their errors.
Nothing in the processor reads it back: the functions run the catalog shipped in their own asset,
which the same deploy wrote.

A publisher may name types it cannot run (`unrunnable`: type -> why): the offline service without PySpark
does, so `submit` refuses their jobs at once rather than send them to fail every attempt.

It also publishes the settings the receiver checks a body with besides the catalog (`receiver_checks`): a
`wait` whose seconds outlast renewal is refused, and renewal is the deployment's `max_renewal_s`; a body
past the deployment's `max_body_bytes` is refused as `TooLarge`; a required param a type's default fills
(`{curated}events/`) is valid only where the deployment has that bucket. Without them `submit` would check
with the default settings, and send what the receiver then dead-letters, or refuse what it takes.

Why the lease table: the catalog is a few kilobytes (this repository's `jobs.json` publishes about 3 KB)
and an item holds 400 KB, where an SSM parameter holds 4 KB (8 KB in the advanced tier). The item has
none of the indexes' keys and no `status`, so no query of the processor and no count of leases meets it;
what reads every item skips it by its key (`longjobs.engine.lease.is_lease_key`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from longjobs.engine.jobs.catalog import JobCatalog, load_catalog
from longjobs.engine.lease.schema import META_PREFIX, PARTITION_KEY

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

    from longjobs.engine.settings import Settings

CATALOG_KEY = META_PREFIX + "job-types"
CATALOG_ATTR = "job_types"
SOURCE_ATTR = "published_by"
UNRUNNABLE_ATTR = "unrunnable"
CHECKS_ATTR = "receiver_checks"
CHECKED_SETTINGS = ("max_renewal_s", "cap_safety_s", "max_body_bytes")
"""The numbers a body's checks read besides the catalog (`longjobs.engine.delivery.models.parse_message`: its
size, and `outlasts_renewal`)."""
CHECKED_LOCATIONS = ("curated_uri", "quarantine_uri", "raw_uri")
"""The bucket URIs a type's defaults are filled from (`{curated}`, `{quarantine}`, `{raw}`): a body missing a
required param that a default fills is valid where the bucket is known, and refused where it is not."""
ITEM_MAX_BYTES = 400 * 1024
"""DynamoDB's item size limit (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/ServiceQuotas.html)."""


@dataclass(frozen=True)
class Published:
    """A published catalog, who published it, and the types it cannot run with why."""

    catalog: JobCatalog
    source: str
    unrunnable: Mapping[str, str] = field(default_factory=dict)
    checks: Mapping[str, Any] = field(default_factory=dict)
    """The receiver's `CHECKED_SETTINGS` and `CHECKED_LOCATIONS` (none from a stack deployed before it
    published them)."""


def receiver_checks(settings: Settings, locations: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `CHECKED_SETTINGS` and `CHECKED_LOCATIONS` the receiver runs with: what `submit` must check a body
    with, as it would. `locations` gives the URIs where `settings` does not (the stack's buckets, which CDK
    resolves at deploy); a bucket the receiver does not have is left out."""
    uris = {name: getattr(settings, name) for name in CHECKED_LOCATIONS} | dict(locations or {})
    return {
        "max_renewal_s": settings.effective_max_renewal_s,
        "cap_safety_s": settings.cap_safety_s,
        "max_body_bytes": settings.max_body_bytes,
        **{name: uri for name, uri in uris.items() if uri},
    }


def catalog_item(
    catalog: JobCatalog,
    source: str,
    unrunnable: Mapping[str, str] | None = None,
    checks: Mapping[str, Any] | None = None,
) -> dict[str, dict[str, str]]:
    """The table item that publishes `catalog` (and the types its publisher cannot run, and the settings
    its receiver checks bodies with), in DynamoDB's typed form. `ValueError` past the item limit."""
    text = json.dumps(catalog.to_data(), separators=(",", ":"), sort_keys=True)
    if len(text.encode()) > ITEM_MAX_BYTES - 1024:
        raise ValueError(
            f"the job catalog is {len(text.encode())} bytes as JSON: more than a DynamoDB item holds "
            f"({ITEM_MAX_BYTES} bytes with its key); shorten the schemas or descriptions"
        )
    item = {PARTITION_KEY: {"S": CATALOG_KEY}, CATALOG_ATTR: {"S": text}, SOURCE_ATTR: {"S": source}}
    if unrunnable:
        item[UNRUNNABLE_ATTR] = {"S": json.dumps(dict(unrunnable), sort_keys=True)}
    if checks:
        item[CHECKS_ATTR] = {"S": json.dumps(dict(checks), sort_keys=True)}
    return item


def publish(
    dynamodb: DynamoDBClient,
    table_name: str,
    catalog: JobCatalog,
    source: str,
    unrunnable: Mapping[str, str] | None = None,
    checks: Mapping[str, Any] | None = None,
) -> None:
    dynamodb.put_item(TableName=table_name, Item=catalog_item(catalog, source, unrunnable, checks))


def read_published(dynamodb: DynamoDBClient, table_name: str) -> Published | None:
    """The published catalog; None when the table has none."""
    item: dict[str, Any] = dynamodb.get_item(
        TableName=table_name, Key={PARTITION_KEY: {"S": CATALOG_KEY}}, ConsistentRead=True
    ).get("Item", {})
    if CATALOG_ATTR not in item:
        return None
    data = json.loads(item[CATALOG_ATTR]["S"])
    catalog = load_catalog(data, include_builtins=False, source=f"{table_name} item {CATALOG_KEY}")
    unrunnable = json.loads(item[UNRUNNABLE_ATTR]["S"]) if UNRUNNABLE_ATTR in item else {}
    return Published(catalog, item.get(SOURCE_ATTR, {}).get("S", ""), unrunnable, checks_of(item))


def read_checks(dynamodb: DynamoDBClient, table_name: str) -> dict[str, Any]:
    """The published receiver checks alone (none when nothing is published): for `submit --jobs-file`,
    which takes the job types from a file but must still check a body with the deployment's settings."""
    item: dict[str, Any] = dynamodb.get_item(
        TableName=table_name,
        Key={PARTITION_KEY: {"S": CATALOG_KEY}},
        ConsistentRead=True,
        ProjectionExpression=CHECKS_ATTR,
    ).get("Item", {})
    return checks_of(item)


def checks_of(item: Mapping[str, Any]) -> dict[str, Any]:
    """The item's `CHECKED_SETTINGS` and `CHECKED_LOCATIONS`; `ValueError` naming the attribute when it is no
    JSON object in a string attribute, or gives a setting as no number or a location as no string (an item
    edited by hand; `true` would pass as 1)."""
    if CHECKS_ATTR not in item:
        return {}
    attribute = item[CHECKS_ATTR]
    text = attribute.get("S") if isinstance(attribute, Mapping) else None
    try:
        checks = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        checks = None
    if not isinstance(checks, dict) or not all(_fits(name, value) for name, value in checks.items()):
        raise ValueError(f"item {CATALOG_KEY}: {CHECKS_ATTR} is no JSON object of the receiver's settings: {attribute}")
    # a newer publisher's other checks are left out: this reader's settings would refuse their names
    return {name: value for name, value in checks.items() if name in CHECKED_SETTINGS + CHECKED_LOCATIONS}


def _fits(name: str, value: Any) -> bool:
    """Whether a published check's value has its setting's type; a name this reader does not know passes."""
    if name in CHECKED_SETTINGS:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if name in CHECKED_LOCATIONS:
        return isinstance(value, str)
    return True
