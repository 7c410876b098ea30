"""The local SparkSession of the offline runtime: created once per process, on first use.

Two local cores and few shuffle partitions: the offline partitions are small, and the machine is
shared with the emulator and the functions.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@cache
def local_session() -> SparkSession:
    from longjobs.pipeline.session import local_session as pipeline_session

    return pipeline_session("sqs-long-jobs-offline", shuffle_partitions=2)
