"""An example of your own job type: count the words of the text files in a folder.

Declared in `jobs.json` as the `wordcount` type (runner `pyspark`, entry `jobs/wordcount.py:run`). The
processor calls `run(spark, params)` with the job message's params, already checked against the
type's JSON Schema, and stores the dict it returns as the job's summary on the lease. The same file
runs on Glue in the cloud and on the local Spark worker offline.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

WORD_SEPARATORS = r"[^\p{L}\p{N}']+"


def run(spark: SparkSession, params: dict[str, Any]) -> dict[str, Any]:
    """Words of at least `min_length` characters in the text files under `input` (Spark skips files whose
    name starts with `_` or `.`, such as a `_SUCCESS` marker); the counts are written to `output` as
    Parquet when it is given; the summary holds the totals and the five most frequent words."""
    min_length = int(params.get("min_length", 1))
    lines = spark.read.text(params["input"])
    words = (
        lines.select(F.explode(F.split(F.lower(F.col("value")), WORD_SEPARATORS)).alias("word"))
        .where(F.length("word") >= min_length)
        .cache()
    )
    counts = words.groupBy("word").count()
    if params.get("output"):
        counts.write.mode("overwrite").parquet(params["output"])
    top = counts.orderBy(F.desc("count"), F.asc("word")).limit(5).collect()
    summary = {
        "lines": lines.count(),
        "words": words.count(),
        "distinct_words": counts.count(),
        "top": [[row["word"], row["count"]] for row in top],
    }
    words.unpersist()
    return summary
