"""The built-in job types, declared exactly as a user declares theirs.

- `spark`: this project's events pipeline (`longjobs/pipeline/events.py:run`), a pyspark type like any other.
  Its `output` and `quarantine` default to the deployment's curated and quarantine buckets.
- `wait`: a Wait state of `seconds` (then a failure when `fail`): canaries, load tests, scenarios.
- `echo`: runs inside the receiver and answers with its text (or fails, when asked to).

The schemas hold the parameters, limits and defaults the built-ins' producers rely on: tightening them
would refuse messages that are valid today.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from longjobs.engine.jobs.types import MAX_WAIT_S as MAX_WAIT_S  # the wait types' limit, named here too
from longjobs.engine.jobs.types import JobType

PROJECT_ROOT = Path(__file__).resolve().parents[3]
"""Where the built-ins' relative entries live: the folder holding the `longjobs` package (this repository,
or site-packages when installed)."""

MAX_PATH_CHARS = 256

LOCATION_SCHEMA: dict[str, Any] = {
    "type": "string",
    "description": "an s3://bucket/key URI or a local path (no other scheme, no surrounding spaces)",
    "minLength": 1,
    "maxLength": MAX_PATH_CHARS,
    # s3://bucket/key, or a local path (the offline runtime's folders): no other scheme, no surrounding
    # spaces, no control characters.
    "pattern": (
        r"^(?![\s])(?!.*[\s]$)(?:s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](?:/[^\x00-\x1f\x7f]*)?"
        r"|(?!.*://)[^\x00-\x1f\x7f]+)$"
    ),
}

SPARK = JobType(
    name="spark",
    runner="pyspark",
    entry="longjobs/pipeline/events.py:run",
    description="The events pipeline: one date's raw JSON-lines events to curated Parquet and a quarantine.",
    params_schema={
        "type": "object",
        "required": ["input", "date", "output", "quarantine"],
        "additionalProperties": False,
        "properties": {
            "input": LOCATION_SCHEMA,
            "date": {
                "type": "string",
                "description": "a YYYY-MM-DD date",
                "format": "date",
                "pattern": r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$",
            },
            "output": LOCATION_SCHEMA,
            "quarantine": LOCATION_SCHEMA,
            "lateness_minutes": {"type": "integer", "minimum": 0, "maximum": 1_440, "default": 60},
        },
    },
    defaults={"output": "{curated}events/", "quarantine": "{quarantine}events/"},
).with_base(PROJECT_ROOT)

WAIT = JobType(
    name="wait",
    runner="wait",
    description="A synthetic job: wait `seconds`, then succeed (or fail, when asked to).",
    params_schema={
        "type": "object",
        "required": ["seconds"],
        "additionalProperties": False,
        "properties": {
            "seconds": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_S},
            "fail": {"type": "boolean", "default": False},
        },
    },
)

ECHO = JobType(
    name="echo",
    runner="inline",
    description="Runs inside the receiver and logs its text (or fails, when asked to): a smoke test of the queue.",
    params_schema={
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "text": {"type": "string", "maxLength": 1_024, "default": ""},
            "fail": {"type": "boolean", "default": False},
        },
    },
)

BUILTIN_TYPES: tuple[JobType, ...] = (SPARK, WAIT, ECHO)
BUILTIN_NAMES = frozenset(t.name for t in BUILTIN_TYPES)
INLINE_TYPES = frozenset({"echo"})
"""Inline job types the receiver has code for."""
