"""Words as the `textstats` job counts them: lower case, accents folded to ASCII.

Folding uses the third-party `unidecode` package (the type's `requirements`), so `Café` and `cafe` are
one word. `fold` runs on Spark's executors as a UDF, so this module and `unidecode` must be importable
there: Glue puts the job's code zip and its installed requirements on every node; offline, the worker
adds them to the local session.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType
from unidecode import unidecode

SEPARATORS = r"[^a-z0-9']+"


def fold(text: str | None) -> str | None:
    """`text` in lower-case ASCII: `Crème Brûlée` is `creme brulee`."""
    return None if text is None else unidecode(text).lower()


def folded_words(lines: DataFrame, min_length: int) -> DataFrame:
    """One row per word (column `word`) of the text column `value`, of at least `min_length` characters."""
    # A plain Python UDF, said outright: left to infer its kind from `fold`'s type hints, Spark 4 warns
    # that it cannot (they are no pandas or Arrow types) on every run.
    folded = F.udf(fold, StringType(), useArrow=False)(F.col("value"))
    return lines.select(F.explode(F.split(folded, SEPARATORS)).alias("word")).where(F.length("word") >= min_length)
