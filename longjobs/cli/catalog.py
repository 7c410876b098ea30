"""The job types a command validates with: the ones the stack or local service it talks to publishes.

A deployed stack writes its catalog into its lease table on every deploy, and `longjobs-offline serve`
writes its own at start (`longjobs.engine.jobs.published`). `--jobs-file FILE` names a file instead, for
a stack whose lease table holds no catalog. A `jobs.json` that happens to be in the current folder is
never read: it may describe another deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from longjobs.cli.errors import CliError, UsageError
from longjobs.cli.resources import LOCAL_ORIGIN
from longjobs.engine.jobs import JobCatalog, JobTypeError, load_catalog_file
from longjobs.engine.jobs.published import CATALOG_KEY, read_checks, read_published

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


@dataclass(frozen=True)
class Catalog:
    """Job types, and where they came from (named in every error that used them)."""

    types: JobCatalog
    origin: str
    unrunnable: Mapping[str, str] = field(default_factory=dict)
    """Types the publisher cannot run, with why (the offline service without PySpark)."""
    checks: Mapping[str, Any] = field(default_factory=dict)
    """The settings the publisher's receiver checks bodies with (`longjobs.engine.jobs.published`); none
    from a file, or from a stack deployed before it published them: the defaults then."""


def from_file(path: str) -> Catalog:
    """The job types `--jobs-file` names. A file that is missing, not JSON or a bad declaration is a
    wrong argument (exit code 2), as argparse's own refusals are."""
    try:
        return Catalog(load_catalog_file(Path(path)), origin=f"--jobs-file {path}")
    except JobTypeError as exc:
        raise UsageError(f"--jobs-file: {exc}") from None


def published(dynamodb: DynamoDBClient, table_name: str, origin: str) -> Catalog | None:
    """What `origin` (its lease table `table_name`) publishes; None when it publishes nothing."""
    try:
        found = read_published(dynamodb, table_name)
    except (JobTypeError, ValueError) as exc:
        raise CliError(f"{origin}'s published job types cannot be read: {exc}") from None
    if found is None:
        return None
    return Catalog(found.catalog, origin=found.source or origin, unrunnable=found.unrunnable, checks=found.checks)


def published_checks(dynamodb: DynamoDBClient, table_name: str, origin: str) -> dict[str, Any]:
    """The settings `origin`'s receiver checks a body with, for a catalog from `--jobs-file`: none (the
    defaults) when it publishes nothing, or the table cannot be read (a stack deployed before it published
    its types, a role without `dynamodb:GetItem`: what `--jobs-file` is for)."""
    try:
        return read_checks(dynamodb, table_name)
    except (BotoCoreError, ClientError):
        return {}
    except ValueError as exc:
        raise CliError(f"{origin}'s published receiver checks cannot be read: {exc}") from None


def not_published(origin: str, table_name: str) -> str:
    """Why the job types are missing, and what to do: a stack publishes them on deploy, the local service
    once it has started (its banner)."""
    if origin.startswith(LOCAL_ORIGIN):
        why = "it publishes them once it has started: try again after its banner"
    else:
        why = "a stack deployed before it published them; deploy it again"
    missing = f"its lease table {table_name} has no item {CATALOG_KEY}"
    return f"{origin} publishes no job types ({missing}: {why}), or pass --jobs-file FILE"
