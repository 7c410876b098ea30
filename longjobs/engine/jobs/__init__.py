"""Job types: declared once (`types`), the built-ins (`builtin`), the catalog that merges and validates
them (`catalog`), and the S3 triggers that turn completion markers into jobs (`triggers`)."""

from longjobs.engine.jobs.builtin import BUILTIN_NAMES, BUILTIN_TYPES, INLINE_TYPES
from longjobs.engine.jobs.catalog import (
    JobCatalog,
    ParamsError,
    builtin_catalog,
    catalog_from_env,
    load_catalog,
    load_catalog_file,
)
from longjobs.engine.jobs.triggers import PartitionJob, S3Trigger, TriggerError
from longjobs.engine.jobs.types import (
    PLATFORMS,
    RUNNERS,
    EmrServerlessSettings,
    GlueSettings,
    JobType,
    JobTypeError,
    StateMachineSettings,
)

__all__ = [
    "BUILTIN_NAMES",
    "BUILTIN_TYPES",
    "INLINE_TYPES",
    "PLATFORMS",
    "RUNNERS",
    "EmrServerlessSettings",
    "GlueSettings",
    "JobCatalog",
    "JobType",
    "JobTypeError",
    "ParamsError",
    "PartitionJob",
    "S3Trigger",
    "StateMachineSettings",
    "TriggerError",
    "builtin_catalog",
    "catalog_from_env",
    "load_catalog",
    "load_catalog_file",
]
