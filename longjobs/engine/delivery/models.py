"""What the jobs queue accepts: job messages of any declared type, and S3 "object created" events.

A body becomes a list of validated jobs (with how many S3 objects were acknowledged without a job),
or raises `BadInput` with an error type and text that the DLQ message carries.

- A job message: `{"job_id": "...", "type": "...", "params": {...}}`. The type must be in the job
  catalog (`UnknownJobType` lists the known ones); the params get the type's defaults and must pass its
  JSON Schema (`InvalidParameters: params.<path>: <what is wrong>`). A wait type's `seconds` must also
  end within renewal (`outlasts_renewal`): a longer wait is stopped at that limit on every attempt.
- S3 events, delivered directly (an S3 event notification), through SNS (not raw: the SNS envelope
  holds the notification) or through EventBridge ("Object Created"). A created object that is a
  trigger's completion marker (`_SUCCESS` by default) becomes its partition's job (see
  `longjobs.engine.jobs.triggers`); any other object is acknowledged and counted, not run. S3's test event,
  and object events other than creation, are acknowledged and dropped.

The Powertools parser models of S3, SNS and EventBridge events are imported on the first S3 event
only: importing them costs about 100 ms, which a receiver of job messages never pays. The job catalog
(`longjobs.engine.jobs`) is imported with the catalog itself, on the first record.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote_plus

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    from longjobs.engine.delivery.types import Delivery
    from longjobs.engine.jobs.catalog import JobCatalog
    from longjobs.engine.jobs.types import JobType
    from longjobs.engine.settings import Settings


class ErrorType:
    """Values of the DLQ message's `ErrorType` attribute."""

    TOO_LARGE = "TooLarge"
    NOT_JSON = "NotJson"
    INVALID_SHAPE = "InvalidShape"
    UNKNOWN_JOB_TYPE = "UnknownJobType"
    INVALID_PARAMETERS = "InvalidParameters"


class BadInput(Exception):
    """A body no retry can fix: it goes to the DLQ at once."""

    def __init__(self, error_type: str, message: str, *, job_type: str | None = None) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.message = message
        self.job_type = job_type
        """The job's type, when the body names one the catalog has (its params are what is wrong)."""


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SHAPES = (
    'expected a job message {"job_id", "type", "params"} or an S3 event (an S3 event notification, '
    "delivered directly or through SNS, or an EventBridge Object Created event)"
)


class Job(BaseModel):
    """One job: the project's job message, whatever its type."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str = Field(min_length=1, max_length=256)
    type: str = Field(min_length=1, max_length=64)
    params: dict[str, Any] = Field(default_factory=dict)

    @field_validator("job_id")
    @classmethod
    def _printable(cls, value: str) -> str:
        if _CONTROL.search(value):
            raise ValueError("must not contain control characters")
        return value


@dataclass(frozen=True)
class Parsed:
    """The jobs a body asks for, and the S3 objects it named that start none (acknowledged, counted)."""

    jobs: list[Job] = field(default_factory=list)
    ignored_objects: int = 0
    events: list[str | None] = field(default_factory=list)
    """For an S3 event, per job: the identity of the object creation that asked for it (`event_key`),
    None when the event names no sequencer; empty for a job message."""
    inline: bool = False
    """A job message whose type runs inside the receiver (no trigger names such a type)."""

    @property
    def fans_out(self) -> bool:
        """Whether its jobs are sent as job messages of their own (`longjobs.engine.receiver.fan_out`): an S3
        event's, when there are several or the one's object creation is known (its sequencer), so that S3
        delivering the event again finds the marker written for it and runs nothing twice. The receiver
        still runs one marker in place on a FIFO queue, or as a copy (`fan_out.runs_in_place`)."""
        return len(self.jobs) > 1 or any(event is not None for event in self.events)


def _describe(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {_message(err)}" for err in exc.errors())


def _message(error: Any) -> str:
    """pydantic's message for one error; for a value that is no object where one is expected, without the
    name of the model class, which means nothing to the message's producer."""
    return "expected a JSON object" if error["type"] == "model_type" else str(error["msg"])


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is beyond a double's range")
    return value


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (not Python's `NoneType`, `list`, `str`)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "array"


def loads_json(text: str) -> Any:
    """JSON as RFC 8259 defines it. Python's reader also takes `NaN` and `Infinity`, and a number beyond a
    double's range as infinity; none is JSON, and a job's params would carry each on as `null`. Nesting
    deeper than the reader goes (RFC 8259, section 9: a parser may limit it) raises `ValueError` too:
    its `RecursionError` would fail the record on every receive, and the read ahead its whole batch. So
    does an integer longer than Python reads (`sys.get_int_max_str_digits()`, 4,300 digits), named in the
    producer's terms rather than with Python's advice to raise the limit."""
    try:
        return json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise ValueError("nested deeper than the receiver reads") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise ValueError(f"an integer of more than {sys.get_int_max_str_digits():,} digits") from None
        raise


def parse_body(body: str, settings: Settings, catalog: JobCatalog | None = None) -> list[Job]:
    """The jobs a message body asks for (see `parse_message`)."""
    return parse_message(body, settings, catalog).jobs


def parse_message(body: str, settings: Settings, catalog: JobCatalog | None = None) -> Parsed:
    """The jobs a message body asks for: one for a job message, one per completion marker of an S3
    event, none for what is acknowledged and dropped. Raises `BadInput` otherwise."""
    if catalog is None:
        from longjobs.engine.jobs import builtin_catalog  # imported on first use: see the module

        catalog = builtin_catalog()
    size = len(body.encode())
    if size > settings.max_body_bytes:
        raise BadInput(ErrorType.TOO_LARGE, f"body is {size} bytes; the limit is {settings.max_body_bytes}")
    try:
        data = loads_json(body)
    except ValueError as exc:
        raise BadInput(ErrorType.NOT_JSON, f"body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(ErrorType.INVALID_SHAPE, f"body is a JSON {_json_kind(data)}, not an object; {SHAPES}")
    if _is_s3_event(data):
        return _s3_jobs(data, settings, catalog)
    job, job_type = parse_job(data, settings, catalog)
    return Parsed([job], inline=job_type.runner == "inline")


def parse_delivery(delivery: Delivery, settings: Settings, catalog: JobCatalog) -> Parsed:
    """`parse_message` of a delivery's body, made once per receive: a batch's read-ahead and each record's
    handling share the record's delivery, so they share its parse, a `BadInput` as much as the jobs."""
    cache = delivery.parse_cache
    if not cache or cache[0] != delivery.body or cache[1] is not settings or cache[2] is not catalog:
        try:
            parsed: Parsed | BadInput = parse_message(delivery.body, settings, catalog)
        except BadInput as bad:
            parsed = bad
        cache[:] = [delivery.body, settings, catalog, parsed]
    if isinstance(cache[3], BadInput):
        raise cache[3]
    result: Parsed = cache[3]
    return result


def parse_job(data: dict[str, Any], settings: Settings, catalog: JobCatalog) -> tuple[Job, JobType]:
    """A job message, its params completed with the type's defaults and validated by its schema, and
    its type."""
    try:
        job = Job.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        if all(err["loc"] and err["loc"][0] == "params" for err in errors):
            raise BadInput(ErrorType.INVALID_PARAMETERS, _describe(exc)) from None
        hint = "" if {"job_id", "type"} & set(data) else f"; {SHAPES}"
        raise BadInput(ErrorType.INVALID_SHAPE, _describe(exc) + hint) from None
    return checked(job, settings, catalog)


def checked(job: Job, settings: Settings, catalog: JobCatalog) -> tuple[Job, JobType]:
    """`job` with its params completed and validated by its type (in `catalog`), and that type."""
    from longjobs.engine.jobs.catalog import ParamsError

    job_type = catalog.get(job.type)
    if job_type is None:
        raise BadInput(
            ErrorType.UNKNOWN_JOB_TYPE,
            f"type: {job.type!r} is not a job type (known types: {', '.join(catalog.names)})",
        )
    try:
        params = catalog.validate_params(job_type, job.params, settings.locations)
    except ParamsError as exc:
        raise BadInput(ErrorType.INVALID_PARAMETERS, str(exc), job_type=job_type.name) from None
    if (outlasts := outlasts_renewal(job_type, params, settings)) is not None:
        raise BadInput(ErrorType.INVALID_PARAMETERS, outlasts, job_type=job_type.name)
    return job.model_copy(update={"params": params}), job_type


def outlasts_renewal(job_type: JobType, params: Mapping[str, Any], settings: Settings) -> str | None:
    """Why a wait job can never succeed under `settings`, else None: its `seconds` do not end within renewal
    (the hard stop `renew_until`: `max_renewal_s`, at most 12 h less `cap_safety_s`, counted from the
    receive). The wait begins after that receive (the lease, the start, the workflow's first states), so a
    wait of all of renewal ends past the hard stop too. The extender would stop each attempt there
    (CAPPED), and the message would reach the DLQ only once its attempts were used up, after `max_attempts`
    holds of that length, with no word of the wait it asked for. With renewal disabled (`max_renewal_s=0`)
    there is no renewal to outlast: a job has its first chunk, which the extender caps once it falls due,
    and a wait shorter than that chunk succeeds; none is refused here."""
    seconds = params.get("seconds")
    if job_type.runner != "wait" or not isinstance(seconds, int | float) or not settings.renewal_enabled:
        return None
    renewal_s = settings.renewal_s
    if seconds < renewal_s:
        return None
    fix = f"give seconds of {math.ceil(renewal_s) - 1} or less"
    if settings.renewal_raisable:
        fix += ", or raise max_renewal_s"
    return (
        f"params.seconds: {seconds} s does not end within renewal ({renewal_s:g} s from the receive, before the "
        f"wait begins: max_renewal_s, at most 12 h less cap_safety_s), which would stop the job on every "
        f"attempt: {fix}"
    )


# -- S3 events ------------------------------------------------------------------------------------


def _is_s3_event(data: dict[str, Any]) -> bool:
    return (
        "Records" in data
        or data.get("Event") == "s3:TestEvent"
        or (data.get("Type") == "Notification" and "TopicArn" in data)
        or (data.get("source") == "aws.s3" and "detail-type" in data)
    )


@dataclass(frozen=True)
class _Created:
    bucket: str
    key: str
    sequencer: str | None = None


def event_key(bucket: str, key: str, sequencer: str | None) -> str | None:
    """One object creation, whichever notification carries it: S3 delivers an event at least once, and
    its `sequencer` orders the events of one key, so bucket, key and sequencer name the event (None
    without a sequencer)."""
    return f"{bucket}/{key}@{sequencer}" if sequencer else None


def _s3_jobs(data: dict[str, Any], settings: Settings, catalog: JobCatalog) -> Parsed:
    from longjobs.engine.jobs.triggers import TriggerError

    created = _created_objects(data)
    jobs: list[Job] = []
    events: list[str | None] = []
    ignored = 0
    for obj in created:
        trigger = catalog.trigger_for(obj.bucket, obj.key)
        if trigger is None:
            ignored += 1  # a data file, a manifest, a folder placeholder: its partition's marker starts the job
            continue
        uri = f"s3://{obj.bucket}/{obj.key}"
        try:
            partition = trigger.job(obj.bucket, obj.key)
        except TriggerError as exc:
            raise BadInput(ErrorType.INVALID_PARAMETERS, str(exc)) from None
        try:
            job, _ = checked(
                Job(job_id=partition.job_id, type=partition.type, params=partition.params), settings, catalog
            )
        except ValidationError as exc:
            raise BadInput(ErrorType.INVALID_PARAMETERS, f"{uri}: {_describe(exc)}") from None
        except BadInput as bad:
            raise BadInput(bad.error_type, f"{uri}: {bad.message}") from None
        jobs.append(job)
        events.append(event_key(obj.bucket, obj.key, obj.sequencer))
    return Parsed(jobs, ignored, events)


def _created_objects(data: dict[str, Any], *, depth: int = 0) -> list[_Created]:
    """The objects an S3 event says were created, whichever way it was delivered."""
    from aws_lambda_powertools.utilities.parser.exceptions import InvalidModelTypeError
    from aws_lambda_powertools.utilities.parser.models import (
        S3EventNotificationEventBridgeModel,
        SnsNotificationModel,
    )

    if data.get("Event") == "s3:TestEvent":
        return []
    try:
        if data.get("Type") == "Notification" and "TopicArn" in data:
            envelope = SnsNotificationModel.model_validate(data)
            try:
                inner = loads_json(str(envelope.Message))
            except ValueError:
                raise BadInput(ErrorType.INVALID_SHAPE, "an SNS notification whose Message is not JSON") from None
            if depth or not isinstance(inner, dict) or not _is_s3_event(inner) or "Type" in inner:
                raise BadInput(
                    ErrorType.INVALID_SHAPE, "an SNS notification whose Message is not an S3 event notification"
                )
            return _created_objects(inner, depth=depth + 1)
        if "Records" in data:
            notification = S3EventNotification.model_validate(data)
            return [
                # keys arrive URL-encoded
                _Created(record.s3.bucket.name, unquote_plus(record.s3.object.key), record.s3.object.sequencer)
                for record in notification.Records
                if record.eventName.startswith("ObjectCreated:") and record.s3.object is not None
            ]
        if data.get("detail-type") != "Object Created":
            return []  # Object Deleted, Restored, Tags Added, ...: nothing to run
        event = S3EventNotificationEventBridgeModel.model_validate(data)
    except ValidationError as exc:
        raise BadInput(ErrorType.INVALID_SHAPE, f"not a valid S3 event: {_describe(exc)}") from None
    except BadInput:
        raise
    except (InvalidModelTypeError, AttributeError, TypeError, KeyError):
        # the models' own validators trip over some malformed records instead of reporting them
        raise BadInput(ErrorType.INVALID_SHAPE, "not a valid S3 event: malformed record") from None
    # EventBridge carries the key as it is: unlike S3 notifications, not URL-encoded, so not decoded
    # (a '+' or '%' in a key stays what it is; tests/unit/test_receiver_models.py cites AWS's pages).
    return [_Created(event.detail.bucket.name, event.detail.object.key, event.detail.object.sequencer)]


class S3EventBucket(BaseModel):
    name: str = Field(min_length=1)


class S3EventObject(BaseModel):
    key: str = Field(min_length=1)
    sequencer: str | None = None


class S3EventEntity(BaseModel):
    bucket: S3EventBucket
    object: S3EventObject | None = None


class S3EventRecord(BaseModel):
    eventSource: Literal["aws:s3"]
    eventName: str
    s3: S3EventEntity


class S3EventNotification(BaseModel):
    """An S3 event notification, read for what the receiver uses: each record's event name, bucket, key and
    sequencer (https://docs.aws.amazon.com/AmazonS3/latest/userguide/notification-content-structure.html).
    Every other field (identity, request parameters, size, eTag, ...) is left unchecked: a record that
    lacks one, or gives a value Powertools' `S3Model` refuses (its `sourceIPAddress` an IP address or
    `s3.amazonaws.com` only; size and eTag on any event but a removal), is still an object creation the
    notification names, and refusing the notification for it would drop every marker in it. Moto's S3,
    the offline runtime's, sends such records (no `userIdentity`, `requestParameters`, sequencer)."""

    Records: list[S3EventRecord]
