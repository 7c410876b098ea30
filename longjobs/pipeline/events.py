"""The built-in `spark` job type's entry: `run(spark, params) -> summary`, as every pyspark job type has.

The events pipeline (`longjobs.pipeline.job`) with its params checked in full first (`PipelineParams`), so a bad
job fails before it reads anything. The Glue entry (`longjobs.pipeline.glue_entry`) and the offline Spark worker
call it like any user's entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from longjobs.pipeline.params import PipelineParams

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run(spark: SparkSession, params: Mapping[str, Any]) -> dict[str, Any]:
    checked = PipelineParams.from_mapping(params)
    from longjobs.pipeline.job import SESSION_CONF
    from longjobs.pipeline.job import run as run_pipeline  # imports Spark: only once the params are known to be good

    # The pipeline's session settings (its time parser policy decides what is malformed): Glue's session
    # is the job's own, and the offline session was built with the same values.
    for key, value in SESSION_CONF.items():
        spark.conf.set(key, value)
    return run_pipeline(spark, checked)
