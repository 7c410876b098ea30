"""The pipeline's job parameters, validated before any data is touched and without Spark.

The same parameters arrive two ways: as the `params` mapping of a job message (the offline Spark
worker calls `PipelineParams.from_mapping`) and as Glue job arguments (`longjobs.pipeline.glue_job` maps them
to the same keys). Every problem is reported at once in one `PipelineParamError` that names each
parameter and the rule it breaks, so a bad job fails before a SparkSession is even needed.

Plain dataclasses and explicit checks, not pydantic: the Glue script then needs nothing beyond the
Python standard library and Glue's own PySpark, whatever Glue's image happens to ship.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

DEFAULT_LATENESS_MINUTES = 60
MAX_LATENESS_MINUTES = 1_440
MAX_PATH_CHARS = 256
"""Paths go into the summary stored on the lease; this bound keeps the summary well under 4 KB."""

PATH_KEYS = ("input", "output", "quarantine")
REQUIRED_KEYS = frozenset({*PATH_KEYS, "date"})
KNOWN_KEYS = frozenset({*REQUIRED_KEYS, "lateness_minutes"})

DATE_PATTERN = re.compile(r"\d{4}-\d{2}-\d{2}")
SCHEME_PATTERN = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
BUCKET_PATTERN = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
PATH_RULE = f"must be s3://<bucket>/<prefix> or a local path, at most {MAX_PATH_CHARS} characters"


class ParamProblem(NamedTuple):
    param: str
    rule: str


class PipelineParamError(ValueError):
    """One or more job parameters break their rules; `problems` names each parameter and rule."""

    def __init__(self, problems: list[ParamProblem]) -> None:
        self.problems = tuple(problems)
        super().__init__("invalid pipeline parameters: " + "; ".join(f"{p.param}: {p.rule}" for p in problems))


@dataclass(frozen=True)
class PipelineParams:
    """One run: the partition `date` of raw events at `input`, curated to `output`, rejects to `quarantine`.

    `input` is a folder (the partition) or a single file. An event is accepted when its timestamp falls
    in the partition's UTC day or up to `lateness_minutes` before it (events arrive late, never early).
    """

    input: str
    date: str
    output: str
    quarantine: str
    lateness_minutes: int = DEFAULT_LATENESS_MINUTES

    def __post_init__(self) -> None:
        problems = validate(self.input, self.date, self.output, self.quarantine, self.lateness_minutes)
        if problems:
            raise PipelineParamError(problems)

    @property
    def day(self) -> dt.date:
        return dt.date.fromisoformat(self.date)

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, object]) -> PipelineParams:
        """Parse a job message's `params`: known snake_case keys only; `lateness_minutes` may be a digit string."""
        if not isinstance(mapping, Mapping):
            raise PipelineParamError([ParamProblem("params", f"must be a mapping, got {type(mapping).__name__}")])
        problems = [
            ParamProblem(key, f"is not a parameter of the pipeline; known: {', '.join(sorted(KNOWN_KEYS))}")
            for key in sorted(map(str, set(mapping) - KNOWN_KEYS))
        ]
        strings: dict[str, str] = {}
        for key in sorted(REQUIRED_KEYS):
            value = mapping.get(key)
            if isinstance(value, str):
                strings[key] = value
            elif key not in mapping:
                problems.append(ParamProblem(key, "is required"))
            else:
                problems.append(ParamProblem(key, f"must be a string, got {type(value).__name__}"))
        lateness = _from_digits(mapping.get("lateness_minutes", DEFAULT_LATENESS_MINUTES))
        # The value rules of the parameters present are checked too, so one error lists every problem.
        get = strings.get
        problems += validate(get("input"), get("date"), get("output"), get("quarantine"), lateness)
        if problems or not isinstance(lateness, int):
            raise PipelineParamError(problems)
        return cls(
            input=strings["input"],
            date=strings["date"],
            output=strings["output"],
            quarantine=strings["quarantine"],
            lateness_minutes=lateness,
        )


def validate(
    input: str | None, date: str | None, output: str | None, quarantine: str | None, lateness_minutes: object
) -> list[ParamProblem]:
    """Every rule broken by these values; a None path or date is one already reported as missing or mistyped."""
    problems: list[ParamProblem] = []
    if date is not None and not _is_date(date):
        problems.append(ParamProblem("date", f"must be a calendar date YYYY-MM-DD, got {date!r}"))
    paths = {"input": input, "output": output, "quarantine": quarantine}
    locations: dict[str, tuple[str, ...]] = {}
    for name, path in paths.items():
        if path is None:
            continue
        rule = path_problem(path)
        if rule:
            problems.append(ParamProblem(name, rule))
        else:
            locations[name] = location(path)
    # No path may be another or lie inside it: output must not overwrite the input, and the three
    # datasets must not read or overwrite one another.
    names = list(locations)
    for i, first in enumerate(names):
        for second in names[i + 1 :]:
            a, b = locations[first], locations[second]
            if a == b:
                problems.append(ParamProblem(second, f"must differ from {first} ({paths[first]!r})"))
            elif a[: len(b)] == b or b[: len(a)] == a:
                problems.append(ParamProblem(second, f"must not contain or lie inside {first} ({paths[first]!r})"))
    if isinstance(lateness_minutes, bool) or not (
        isinstance(lateness_minutes, int) and 0 <= lateness_minutes <= MAX_LATENESS_MINUTES
    ):
        problems.append(
            ParamProblem("lateness_minutes", f"must be an integer 0..{MAX_LATENESS_MINUTES}, got {lateness_minutes!r}")
        )
    return problems


def path_problem(path: str) -> str | None:
    """Why `path` is not an s3://bucket/... URI or a local path, or None when it is one."""
    if not path.strip():
        return f"{PATH_RULE}; got an empty value"
    if path != path.strip() or any(ord(char) < 32 for char in path):
        return f"{PATH_RULE}; got {path!r} with surrounding whitespace or control characters"
    if len(path) > MAX_PATH_CHARS:
        return f"{PATH_RULE}; got {len(path)} characters"
    scheme = SCHEME_PATTERN.match(path)
    if scheme is None:
        return None
    if scheme.group(1) != "s3":
        return f"{PATH_RULE}; got scheme {scheme.group(1)!r} in {path!r}"
    bucket = path[len("s3://") :].split("/", 1)[0]
    if not bucket:
        return f"{PATH_RULE}; got no bucket in {path!r}"
    if not BUCKET_PATTERN.fullmatch(bucket):
        return f"{PATH_RULE}; got {bucket!r}, not a valid bucket name"
    return None


def location(path: str) -> tuple[str, ...]:
    """A comparable form of a valid path: ("s3", bucket, *key parts) or ("local", *absolute parts)."""
    if path.startswith("s3://"):
        return ("s3", *(part for part in path[len("s3://") :].split("/") if part))
    return ("local", *os.path.abspath(path).split(os.sep))


def _is_date(value: str) -> bool:
    if not DATE_PATTERN.fullmatch(value):
        return False
    try:
        dt.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _from_digits(value: object) -> object:
    """An int for a digit string (Glue passes every argument as a string); anything else unchanged."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return value
