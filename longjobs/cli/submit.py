"""`submit`: build a job message, validate it as the receiver would, send it to the jobs queue."""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from longjobs.cli.catalog import Catalog
from longjobs.cli.errors import CliError, UsageError
from longjobs.engine.delivery.models import BadInput, ErrorType, loads_json, parse_body
from longjobs.engine.settings import Settings, is_fifo_url

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient


@dataclass(frozen=True)
class Submitted:
    message_id: str
    job_id: str | None  # None when the body asks for several jobs (an S3 notification)
    jobs: int


def parse_value(text: str) -> Any:
    """A `--param` value: JSON when it parses (`30`, `true`, `"x"`, `[1]`), else the text itself (`NaN`,
    which is not JSON, stays the text)."""
    try:
        return loads_json(text)
    except ValueError:
        return text


def parse_params(pairs: Iterable[str]) -> dict[str, Any]:
    """`k=v` pairs into a params object. `UsageError` for a pair without `=`, an empty or repeated key."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UsageError(f"--param {pair!r}: expected key=value")
        if key in params:
            raise UsageError(f"--param {key} is given twice")
        params[key] = parse_value(value)
    return params


def new_job_id(job_type: str, now: float | None = None) -> str:
    """A readable, unique enough job id: `<type>-<UTC time>-<6 hex>`."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"{job_type}-{stamp}-{secrets.token_hex(3)}"


def job_body(job_type: str, params: dict[str, Any], job_id: str) -> str:
    """The project's job message (docs/messages.md)."""
    return json.dumps({"job_id": job_id, "type": job_type, "params": params}, separators=(",", ":"))


def validation_settings(
    curated_uri: str | None = None, quarantine_uri: str | None = None, checks: Mapping[str, Any] | None = None
) -> Settings:
    """The settings the deployed receiver checks a body with: the `checks` it publishes (its renewal, which a
    `wait` must end within, and the bucket locations it fills defaults from), else the locations its stack's
    outputs give; defaults for the rest."""
    try:
        return Settings(**{"curated_uri": curated_uri, "quarantine_uri": quarantine_uri, **(checks or {})})
    except ValidationError as exc:  # a published item that is not settings
        why = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise CliError(f"the published receiver checks {dict(checks or {})} are not settings: {why}") from None


def validate(body: str, settings: Settings, catalog: Catalog) -> list[Any]:
    """The jobs the receiver would make of `body` with `catalog`; `CliError` with the DLQ's `ErrorType:
    message`, and the catalog it used, if none, or naming a job's type its publisher cannot run."""
    _refuse_unrunnable(_named_type(body), catalog)
    try:
        jobs = parse_body(body, settings, catalog.types)
    except BadInput as bad:
        about_types = bad.error_type in (ErrorType.UNKNOWN_JOB_TYPE, ErrorType.INVALID_PARAMETERS)
        origin = f" (job types of {catalog.origin})" if about_types else ""  # not for a body that is not JSON
        raise CliError(f"{bad.error_type}: {bad.message}{origin}") from None
    if not jobs:
        raise CliError("the body asks for no job: the receiver would acknowledge it and drop it")
    for job in jobs:  # an S3 notification's jobs too
        _refuse_unrunnable(job.type, catalog)
    return jobs


def _named_type(body: str) -> Any:
    """The `type` a job message names, before its params are checked: a type that cannot run is said first."""
    try:
        data = loads_json(body)
    except ValueError:
        return None
    return data.get("type") if isinstance(data, dict) else None


def _refuse_unrunnable(job_type: Any, catalog: Catalog) -> None:
    if isinstance(job_type, str) and job_type in catalog.unrunnable:
        raise CliError(f"job type {job_type!r} cannot run on {catalog.origin}: {catalog.unrunnable[job_type]}")


def content_deduplication_id(body: str) -> str:
    """The deduplication id SQS's content-based deduplication gives a message: the SHA-256 of its body."""
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def submit(
    sqs: SQSClient,
    queue_url: str,
    body: str,
    settings: Settings,
    catalog: Catalog,
    *,
    group_id: str | None = None,
    deduplication_id: str | None = None,
) -> Submitted:
    """Validate, then send. Nothing is sent when validation fails. A FIFO queue needs the message's group.
    Its deduplication id defaults to `content_deduplication_id(body)`, so a FIFO queue deduplicates by
    body whether or not it has content-based deduplication (without it, SQS refuses a send with no id)."""
    if is_fifo_url(queue_url) != (group_id is not None):
        raise CliError(
            "a FIFO queue needs --message-group-id" if group_id is None else "--message-group-id: not a FIFO queue"
        )
    if deduplication_id is not None and group_id is None:
        raise CliError("--message-deduplication-id: not a FIFO queue")
    jobs = validate(body, settings, catalog)
    if group_id is None:
        message_id = sqs.send_message(QueueUrl=queue_url, MessageBody=body)["MessageId"]
    else:
        message_id = sqs.send_message(
            QueueUrl=queue_url,
            MessageBody=body,
            MessageGroupId=group_id,
            MessageDeduplicationId=content_deduplication_id(body) if deduplication_id is None else deduplication_id,
        )["MessageId"]
    job_id = str(jobs[0].job_id) if len(jobs) == 1 else None
    return Submitted(message_id=message_id, job_id=job_id, jobs=len(jobs))
