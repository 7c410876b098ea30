"""The `textstats` job type's entry: word statistics of the text files under `input`.

Declared in `jobs.json` with `"code": "jobs"` (this folder's parent is the import root, so the entry is
the module `textstats.job` and imports its helper as `textstats.words`) and `"requirements":
["Unidecode==1.4.0"]`. See docs/jobs.md, "Code in several files, and packages".
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from textstats.words import folded_words


def run(spark: SparkSession, params: dict[str, Any]) -> dict[str, Any]:
    """Words of at least `min_length` characters, accents folded; the counts go to `output` as Parquet
    when it is given; the summary holds the totals and the five most frequent words."""
    lines = spark.read.text(params["input"])
    words = folded_words(lines, int(params.get("min_length", 1))).cache()
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
