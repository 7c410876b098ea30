"""S3 triggers: which created objects start a job, of which type, with which parameters.

A data team writes a partition as many files and then a completion marker (`_SUCCESS` by default, as
Spark and Hadoop write it). The partition's job starts when its marker arrives, on the marker's whole
folder; every other object (the data files, a `_manifest.json`, the console's "Create folder"
placeholder) is acknowledged and counted, not run. So one partition is one job, whose id is
deterministic (`<type>:<bucket>/<folder>`): two messages for it never run at the same time (the job
lock), and a re-delivered marker re-runs the same partition.

    {"bucket": null, "prefix": "events/", "marker": "_SUCCESS", "job_type": "spark",
     "params": {"input": "s3://{bucket}/{prefix}", "date": "{date}"}}

Placeholders in `params` string values: `{bucket}`, `{prefix}` (the marker's folder, ending in `/`),
`{key}` (the marker's key) and `{date}` (from a `date=YYYY-MM-DD/` folder in the key).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote_plus

from pydantic import BaseModel, ConfigDict, Field, field_validator

PLACEHOLDERS = ("bucket", "prefix", "key", "date")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_PARTITION_DATE = re.compile(r"(?:^|/)date=(\d{4}-\d{2}-\d{2})(?:/|$)")
JOB_ID_MAX = 256
SPARK_PARAMS: dict[str, Any] = {"input": "s3://{bucket}/{prefix}", "date": "{date}"}
"""A trigger's params when it gives none: the built-in `spark` type's. A trigger of another type must give
its own (the catalog refuses it otherwise)."""


class TriggerError(ValueError):
    """A marker's folder cannot fill its trigger's parameters (no `date=` folder for `{date}`)."""


class S3Trigger(BaseModel):
    """One rule: markers named `marker` under `prefix` of `bucket` (any bucket when None) start `job_type`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bucket: str | None = Field(default=None, description="Only this bucket's objects; None: any bucket.")
    prefix: str = Field(default="", description="Only keys under this prefix.")
    marker: str = Field(
        default="_SUCCESS", min_length=1, pattern=r"^[^/]+$", description="The completion marker's name."
    )
    job_type: str = "spark"
    params: dict[str, Any] = Field(default_factory=lambda: dict(SPARK_PARAMS))

    @field_validator("params")
    @classmethod
    def _known_placeholders(cls, value: dict[str, Any]) -> dict[str, Any]:
        for name, template in value.items():
            if isinstance(template, str):
                unknown = set(_PLACEHOLDER.findall(template)) - set(PLACEHOLDERS)
                if unknown:
                    raise ValueError(
                        f"{name}: unknown placeholder(s) {', '.join(sorted(unknown))}; known: {', '.join(PLACEHOLDERS)}"
                    )
        return value

    def matches(self, bucket: str, key: str) -> bool:
        if self.bucket is not None and self.bucket != bucket:
            return False
        folder, _, name = key.rpartition("/")
        return name == self.marker and (f"{folder}/" if folder else "").startswith(self.prefix)

    def job(self, bucket: str, key: str) -> PartitionJob:
        """The job of the partition whose marker is `s3://bucket/key`. Raises `TriggerError`."""
        folder = key.rpartition("/")[0]
        prefix = f"{folder}/" if folder else ""
        partition = _PARTITION_DATE.search(prefix)
        values = {"bucket": bucket, "prefix": prefix, "key": key, "date": partition.group(1) if partition else None}

        def fill(template: Any, name: str) -> Any:
            if not isinstance(template, str):
                return template

            def one(match: re.Match[str]) -> str:
                value = values[match.group(1)]
                if value is None:
                    raise TriggerError(
                        f"s3://{bucket}/{key}: params.{name} needs {{date}}, "
                        "and the key has no 'date=YYYY-MM-DD/' folder"
                    )
                return value

            return _PLACEHOLDER.sub(one, template)

        params = {name: fill(template, name) for name, template in self.params.items()}
        return PartitionJob(job_id=partition_job_id(self.job_type, bucket, prefix), type=self.job_type, params=params)


@dataclass(frozen=True)
class PartitionJob:
    job_id: str
    type: str
    params: dict[str, Any]


def partition_job_id(job_type: str, bucket: str, prefix: str) -> str:
    """`<type>:<bucket>/<folder>`: the same partition always gets the same id (long ones a digest of it)."""
    job_id = f"{job_type}:{bucket}/{prefix}"
    if len(job_id) <= JOB_ID_MAX:
        return job_id
    import hashlib  # rarely needed: not at every cold start

    return f"{job_type}:sha256:{hashlib.sha256(job_id.encode()).hexdigest()}"


NOTIFICATION_FILTER_SAFE = "/!-_.*'()"
"""What S3 takes as it is in a notification filter's prefix or suffix, beside letters and digits: its safe
characters (https://docs.aws.amazon.com/AmazonS3/latest/userguide/object-keys.html), and `/`."""


def notification_filter(value: str) -> str:
    """A trigger's prefix or marker as an S3 notification filter must give it: a space as `+`, any other
    special character URL-encoded (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-how-to-filtering.html),
    as the notification itself encodes the key. A prefix such as `events/source=web/` given as it is
    matches no key, and its markers notify nothing."""
    return quote_plus(value, safe=NOTIFICATION_FILTER_SAFE)


DEFAULT_TRIGGERS: tuple[S3Trigger, ...] = (S3Trigger(),)
"""Without a configuration: `_SUCCESS` markers anywhere start the built-in `spark` type on their folder."""
