"""What the jobs queue accepts: the project's job message and S3 event notifications.

A body either becomes a list of validated jobs, is recognised as something to acknowledge and drop
(S3's test event, object events other than creation), or raises `BadInput` with an error type and
text that the DLQ message carries.
"""

from __future__ import annotations

import json
import re
from datetime import date
from typing import Annotated, Any, Literal
from urllib.parse import unquote_plus

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.exceptions import InvalidModelTypeError
from aws_lambda_powertools.utilities.parser.models import S3Model
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from functions.settings import SQS_MAX_VISIBILITY_S, Settings


class ErrorType:
    """Values of the DLQ message's `ErrorType` attribute."""

    TOO_LARGE = "TooLarge"
    NOT_JSON = "NotJson"
    INVALID_SHAPE = "InvalidShape"
    UNKNOWN_JOB_TYPE = "UnknownJobType"
    INVALID_PARAMETERS = "InvalidParameters"


class BadInput(Exception):
    """A body no retry can fix: it goes to the DLQ at once."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/.*)?$")
_PARTITION = re.compile(r"(?:^|/)date=(\d{4}-\d{2}-\d{2})(?:/|$)")


def _check_location(value: str) -> str:
    """An `s3://bucket/...` URI or a local path (the offline runtime's folders)."""
    if not value or value != value.strip() or _CONTROL.search(value):
        raise ValueError("must be a non-empty path without surrounding spaces or control characters")
    if value.startswith("s3://") and not _S3_URI.match(value):
        raise ValueError(f"{value!r} is not an s3://bucket/key URI")
    if "://" in value and not value.startswith("s3://"):
        raise ValueError(f"{value!r}: only s3:// URIs and local paths are read")
    return value


class _Params(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class WaitParams(_Params):
    """A synthetic job: wait this long, then succeed (or fail, when asked to)."""

    seconds: int = Field(ge=0, le=SQS_MAX_VISIBILITY_S)
    fail: bool = False


class SparkParams(_Params):
    """One partition of the events pipeline. The pipeline checks these again in full; this is the
    receiver's early check so a hopeless job goes to the DLQ instead of failing five times (the
    Lambda asset cannot import `pipeline/`, which needs Spark)."""

    input: str
    date: str
    output: str | None = None
    quarantine: str | None = None
    lateness_minutes: int = Field(default=60, ge=0, le=1_440)

    @field_validator("input", "output", "quarantine")
    @classmethod
    def _location(cls, value: str | None) -> str | None:
        return None if value is None else _check_location(value)

    @field_validator("date")
    @classmethod
    def _date(cls, value: str) -> str:
        try:
            if len(value) != 10:
                raise ValueError
            date.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a YYYY-MM-DD date") from None
        return value


class EchoParams(_Params):
    """The inline job: answers with its text (or fails, when asked to). A smoke test of the queue."""

    text: str = Field(default="", max_length=1_024)
    fail: bool = False


class _Job(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str = Field(min_length=1, max_length=256)

    @field_validator("job_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        if _CONTROL.search(value):
            raise ValueError("must not contain control characters")
        return value


class WaitJob(_Job):
    type: Literal["wait"]
    params: WaitParams


class SparkJob(_Job):
    type: Literal["spark"]
    params: SparkParams


class EchoJob(_Job):
    type: Literal["echo"]
    params: EchoParams = EchoParams()


Job = WaitJob | SparkJob | EchoJob
JobMessage = Annotated[Job, Field(discriminator="type")]

JOB_TYPES = ("echo", "spark", "wait")
INLINE_JOB_TYPES = frozenset({"echo"})
"""Job types short enough to run inside the receiver; every other type runs as a workflow execution."""


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}" for err in exc.errors())


def _job_error(exc: ValidationError) -> BadInput:
    errors = exc.errors()
    if any(err["type"] == "union_tag_invalid" for err in errors):
        return BadInput(ErrorType.UNKNOWN_JOB_TYPE, f"{_describe(exc)} (known types: {', '.join(JOB_TYPES)})")
    if all(len(err["loc"]) > 1 and err["loc"][1] == "params" for err in errors):
        return BadInput(ErrorType.INVALID_PARAMETERS, _describe(exc))
    return BadInput(ErrorType.INVALID_SHAPE, _describe(exc))


def parse_body(body: str, settings: Settings) -> list[Job]:
    """The jobs a message body asks for: one for a job message, one per created object for an S3
    notification, none for what is acknowledged and dropped. Raises `BadInput` otherwise."""
    size = len(body.encode())
    if size > settings.max_body_bytes:
        raise BadInput(ErrorType.TOO_LARGE, f"body is {size} bytes; the limit is {settings.max_body_bytes}")
    try:
        data = json.loads(body)
    except ValueError as exc:
        raise BadInput(ErrorType.NOT_JSON, f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(ErrorType.INVALID_SHAPE, f"body is a JSON {type(data).__name__}, not an object")
    if data.get("Event") == "s3:TestEvent":
        return []
    if "Records" in data:
        jobs = _s3_jobs(data)
    else:
        try:
            jobs = [parse(event=data, model=JobMessage)]  # type: ignore[call-overload]  # an Annotated union
        except ValidationError as exc:
            raise _job_error(exc) from None
    return [with_defaults(job, settings) for job in jobs]


def _s3_jobs(data: dict[str, Any]) -> list[Job]:
    try:
        notification = parse(event=data, model=S3Model)
    except ValidationError as exc:
        raise BadInput(ErrorType.INVALID_SHAPE, f"not an S3 event notification: {_describe(exc)}") from None
    except InvalidModelTypeError:  # the model's own validators trip over some malformed records
        raise BadInput(ErrorType.INVALID_SHAPE, "not an S3 event notification: malformed record") from None
    jobs: list[Job] = []
    for record in notification.Records:
        if not record.eventName.startswith("ObjectCreated:") or record.s3.object is None:
            continue
        bucket = record.s3.bucket.name
        key = unquote_plus(record.s3.object.key)  # notifications URL-encode keys
        partition = _PARTITION.search(key)
        if partition is None:
            raise BadInput(
                ErrorType.INVALID_PARAMETERS,
                f"s3://{bucket}/{key} names no partition date (expected a 'date=YYYY-MM-DD/' folder in its key)",
            )
        uri = f"s3://{bucket}/{key}"
        try:
            params = SparkParams(input=uri, date=partition.group(1))
            jobs.append(SparkJob(job_id=uri[-256:], type="spark", params=params))
        except ValidationError as exc:
            raise BadInput(ErrorType.INVALID_PARAMETERS, f"s3://{bucket}/{key}: {_describe(exc)}") from None
    return jobs


def with_defaults(job: Job, settings: Settings) -> Job:
    """A Spark job with its outputs filled in from the settings, refused when neither names one."""
    if not isinstance(job, SparkJob):
        return job
    output = job.params.output or settings.spark_output_uri
    quarantine = job.params.quarantine or settings.spark_quarantine_uri
    missing = [name for name, value in (("output", output), ("quarantine", quarantine)) if value is None]
    if missing:
        raise BadInput(
            ErrorType.INVALID_PARAMETERS,
            f"params.{missing[0]} is required (no SPARK_{missing[0].upper()}_URI default is configured)",
        )
    if output == job.params.input:
        raise BadInput(ErrorType.INVALID_PARAMETERS, "params.output must differ from params.input")
    return job.model_copy(update={"params": job.params.model_copy(update={"output": output, "quarantine": quarantine})})
