"""The pipeline: one date's raw JSON-lines events to curated Parquet, a quarantine and a summary.

Stages, each one Spark job (an action):

1. read + quarantine: the lines are parsed by Spark's JSON source against an explicit schema
   (PERMISSIVE, so a line that does not fit lands in `_corrupt_record` instead of failing the job).
   Each row gets the first quarantine reason that applies (`longjobs.pipeline.schema.REASONS`) or none.
   The classified rows are cached: both the quarantine and the valid rows come from them, so the
   input is read and parsed once. The rejects are written with their reason, raw line and source
   file; rows read and rejects by reason are counted by an `Observation` on that same write.
2. dedupe + events: valid rows are de-duplicated by `event_id`, keeping the latest (`ts`, ties broken
   by the other fields, so the pick is the same on every run), and written as the curated events.
3. user_hourly: per user and hour, events, distinct sessions, purchases and revenue.
4. type_daily: per event type, events, distinct users and the amount total.

The two aggregates read the curated events back from their Parquet (only the columns they use)
rather than from a cache of the de-duplicated rows: building that cache costs more than the reads
(on 2,000,000 events it makes the whole run about a quarter longer).

Every dataset is Parquet, partitioned by `date` (the run's partition) and, except `type_daily` and
the quarantine, by `hour`. The events and `user_hourly` are written into their `date=` folder,
partitioned by `hour` alone: the date is in the path rather than a column of equal values, which
the write would otherwise hash, shuffle and sort on as its first key (partitioning by that column too
makes the whole run 6% slower: medians of 4 interleaved runs on 5,000,000 events). Each write overwrites
dynamically: only the partitions it writes are replaced, so a retried run gives the same output and
other dates are untouched. (The mode is set on each write, the per-write form of
`spark.sql.sources.partitionOverwriteMode=dynamic`, so the session's own settings are left alone
for other jobs sharing it.) A partition a re-run no longer writes at all, say an hour whose every
event has since been removed from the input, keeps its old files: dynamic overwrite only replaces
what it writes.

An accepted event's timestamp lies in the partition's UTC day or up to the lateness before it. All
rows of a run belong to its date, so late events count in hour 0. Hours are computed from epoch
seconds, not from the session time zone, so they are UTC wherever the job runs.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, Observation, SparkSession, Window
from pyspark.sql import functions as F

from longjobs.pipeline.params import PipelineParams
from longjobs.pipeline.schema import (
    CORRUPT_COLUMN,
    EVENT_FIELDS,
    EVENTS,
    MALFORMED,
    MISSING_FIELD,
    MISSING_ID,
    NEGATIVE_AMOUNT,
    OUT_OF_WINDOW,
    PARSE_SCHEMA,
    PURCHASE,
    QUARANTINE,
    REASONS,
    REVENUE_TYPE,
    TYPE_DAILY,
    USER_HOURLY,
)

SECONDS_PER_HOUR = 3_600

NEARLY_UNIQUE_COLUMNS = ("event_id", "session_id")
"""Event columns with (almost) a value per row (about three events a session): a Parquet dictionary
cannot shrink them, it fills up and falls back to plain encoding, and building it is a large part
of the write's cost. On 4,825,442 curated events (medians of 3) the write takes 9.6 s with
Spark's defaults, 7.9 s without these dictionaries and 6.5 s with INT64 timestamps as well
(`SESSION_CONF`); the files are 118 MB with the defaults and 110 MB with both."""
PLAIN_ENCODED = {f"parquet.enable.dictionary#{column}": "false" for column in NEARLY_UNIQUE_COLUMNS}

TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX"
"""The form producers write (milliseconds and a zone, `2024-05-01T13:45:12.123Z`), parsed by a
formatter built once. Spark 3.5's default parser resolves the zone of every value anew, compiling
two regular expressions each time: that is almost a quarter of the read stage's CPU (a Java Flight
Recorder profile, 5,000,000 events), and with this format the JSON read takes about 11% less time
(interleaved runs). Any other form falls back to the default parser, so what is accepted and the
instants read are the default parser's. Only under the `CORRECTED` time parser policy (`SESSION_CONF`): under
Spark's default policy a value the formatter refuses but Spark 2's parser took (`25:00`) fails the
whole job instead of quarantining its line."""
TIME_PARSER_POLICY = "spark.sql.legacy.timeParserPolicy"

SESSION_CONF = {
    # The classified rows are cached once and read twice, in memory: compressing that cache costs
    # about a third more CPU on the read stage (measured, 5,000,000 events) and saves nothing here.
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # Spark 3.5 sorts every input partition once more before the de-duplicating window's shuffle, to
    # drop all but the first row of each event id early. With few duplicates that extra sort drops
    # almost nothing: with it off, the whole run takes about a quarter less time (2,000,000 events, measured).
    "spark.sql.optimizer.windowGroupLimitThreshold": "-1",
    # Timestamps as Parquet's INT64 microseconds, the standard type, instead of Spark's legacy INT96:
    # cheaper to write and smaller (see `PLAIN_ENCODED` for the figures), and read by Glue, Athena and
    # Spark alike.
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # Spark 3's parser only; a value it refuses is malformed (see `TIMESTAMP_FORMAT`).
    TIME_PARSER_POLICY: "CORRECTED",
}
"""Settings for a session that runs the pipeline; `run` itself leaves the session's settings alone."""


def run(spark: SparkSession, params: PipelineParams) -> dict[str, Any]:
    """Run the pipeline for `params` and return its summary (see `summarize`)."""
    stages = StageClock()
    partition = f"date={params.date}"
    classified = classify(read_events(spark, params.input), params).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        with stages("read_quarantine"):
            # Counted on every classified row, as the rejects are written: the one pass over the input.
            counted, reads = observe(
                classified,
                {"rows_read": F.count(F.lit(1)), **{reason: _count(F.col("reason") == reason) for reason in REASONS}},
            )
            write_partitions(quarantine_rows(counted, params), params.quarantine, ["date"])
            read = values(reads)
        with stages("dedupe_events"):
            late = _count(F.col("ts") < F.lit(day_start(params)))
            deduped = dedupe(classified.where(F.col("reason").isNull()), params)
            events = write_counted(
                deduped, _join(params.output, EVENTS, partition), ["hour"], {"late": late}, options=PLAIN_ENCODED
            )
    finally:
        classified.unpersist()
    curated = spark.read.parquet(_join(params.output, EVENTS, partition))
    with stages(USER_HOURLY):
        user_hourly = write_counted(user_hourly_rows(curated), _join(params.output, USER_HOURLY, partition), ["hour"])
    with stages(TYPE_DAILY):
        daily = type_daily_rows(curated).withColumn("date", F.lit(params.date))
        type_daily = write_counted(daily, _join(params.output, TYPE_DAILY), ["date"])
    quarantined = {reason: read[reason] for reason in REASONS}
    valid = read["rows_read"] - sum(quarantined.values())
    return summarize(
        params,
        rows_read=read["rows_read"],
        quarantined=quarantined,
        duplicates_dropped=valid - events["rows"],
        late_accepted=events["late"],
        rows_written={
            EVENTS: events["rows"],
            USER_HOURLY: user_hourly["rows"],
            TYPE_DAILY: type_daily["rows"],
            QUARANTINE: sum(quarantined.values()),
        },
        seconds=stages.seconds,
    )


def read_events(spark: SparkSession, path: str) -> DataFrame:
    """The raw events at `path` (a folder or one file) with the explicit schema; blank lines are skipped.

    PERMISSIVE: a line that is no JSON object, or has a field of the wrong type, is kept, with the
    line itself in `_corrupt_record`. (Spark's JSON source parses faster than `from_json` over text.)
    Timestamps in `TIMESTAMP_FORMAT` take a fast path when the session allows it; the rest go to
    Spark's default parser.
    """
    reader = spark.read.schema(PARSE_SCHEMA).option("mode", "PERMISSIVE")
    reader = reader.option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
    if str(spark.conf.get(TIME_PARSER_POLICY, "EXCEPTION")).upper() == "CORRECTED":
        reader = reader.option("timestampFormat", TIMESTAMP_FORMAT).option("enableDateTimeParsingFallback", "true")
    return reader.json(path)


def classify(events: DataFrame, params: PipelineParams) -> DataFrame:
    """Give each raw event its quarantine reason, or null when it is valid.

    A reject keeps its `line` (the raw line when it could not be parsed, else the event as parsed,
    re-serialised in UTC) and its `source_file`; a valid row keeps neither, so the cache stays small.
    """
    column = F.col
    reason = (
        F.when(column(CORRUPT_COLUMN).isNotNull(), MALFORMED)
        .when(_blank(column("event_id")), MISSING_ID)
        .when(
            _blank(column("user_id"))
            | _blank(column("session_id"))
            | column("ts").isNull()
            | _blank(column("type"))
            | column("amount").isNull(),
            MISSING_FIELD,
        )
        .when(column("amount") < 0, NEGATIVE_AMOUNT)
        .when(
            (column("ts") < F.lit(day_start(params) - dt.timedelta(minutes=params.lateness_minutes)))
            | (column("ts") >= F.lit(day_start(params) + dt.timedelta(days=1))),
            OUT_OF_WINDOW,
        )
    )
    rejected = column("reason").isNotNull()
    as_parsed = F.to_json(F.struct(*EVENT_FIELDS), {"timeZone": "UTC"})
    return events.withColumn("reason", reason).select(
        *EVENT_FIELDS,
        "reason",
        F.when(rejected, F.coalesce(column(CORRUPT_COLUMN), as_parsed)).alias("line"),
        F.when(rejected, F.input_file_name()).alias("source_file"),
    )


def quarantine_rows(classified: DataFrame, params: PipelineParams) -> DataFrame:
    """The rejected rows in the quarantine's layout: reason, raw line, source file and the date."""
    return classified.where(F.col("reason").isNotNull()).select(
        "reason", "line", "source_file", F.lit(params.date).alias("date")
    )


def dedupe(valid: DataFrame, params: PipelineParams) -> DataFrame:
    """One row per `event_id`, the latest, with the event's UTC `hour`; only the event's fields."""
    latest_first = Window.partitionBy("event_id").orderBy(
        F.col("ts").desc(), F.col("amount").desc(), "user_id", "session_id", "type"
    )
    since_start = F.col("ts").cast("long") - int(day_start(params).timestamp())
    return (
        valid.withColumn("_rank", F.row_number().over(latest_first))
        .where(F.col("_rank") == 1)
        .select(
            *EVENT_FIELDS,
            # late events (before the day) count in hour 0
            F.greatest(F.lit(0), F.floor(since_start / SECONDS_PER_HOUR)).cast("int").alias("hour"),
        )
    )


def user_hourly_rows(events: DataFrame) -> DataFrame:
    """Per hour and user: events, distinct sessions, purchases and revenue (the purchases' amount).

    Two plain aggregations, per session then per user, rather than one with a distinct count: Spark
    plans that by doubling every row (an `Expand`) before its first aggregation. On 5,000,000 events
    (three interleaved rounds) this stage takes 7% to 27% less time than with the distinct count.
    """
    purchase = F.col("type") == PURCHASE
    per_session = events.groupBy("hour", "user_id", "session_id").agg(
        F.count(F.lit(1)).alias("events"),
        _count(purchase).alias("purchases"),
        F.sum(F.when(purchase, F.col("amount"))).alias("revenue"),
    )
    return per_session.groupBy("hour", "user_id").agg(
        F.sum("events").alias("events"),
        F.count(F.lit(1)).alias("sessions"),
        F.sum("purchases").alias("purchases"),
        F.coalesce(F.sum("revenue"), F.lit(0)).cast(REVENUE_TYPE).alias("revenue"),
    )


def type_daily_rows(events: DataFrame) -> DataFrame:
    """Per event type: events, distinct users and the total amount."""
    return events.groupBy("type").agg(
        F.count(F.lit(1)).alias("events"),
        F.countDistinct("user_id").alias("users"),
        F.sum("amount").alias("amount_total"),
    )


def observe(rows: DataFrame, metrics: dict[str, Column]) -> tuple[DataFrame, Observation]:
    """`rows` with `metrics` gathered by whatever action runs on them next, not by a pass of their own."""
    # A fresh name each time: two runs sharing a session must not read each other's metrics.
    observation = Observation(f"pipeline-{uuid.uuid4().hex}")
    return rows.observe(observation, *(metric.alias(name) for name, metric in metrics.items())), observation


def values(observation: Observation) -> dict[str, int]:
    """The metrics of an observation whose action has run (a sum over no rows is null: 0)."""
    return {name: int(value or 0) for name, value in observation.get.items()}


def write_counted(
    rows: DataFrame,
    path: str,
    partition_by: list[str],
    metrics: dict[str, Column] | None = None,
    *,
    options: dict[str, str] | None = None,
) -> dict[str, int]:
    """Write `rows` one file per output partition; return their count (`rows`) and `metrics`, gathered by the write.

    The rows are shuffled by the partition columns first, so each partition (a date, or a date and an
    hour) is one file from one task. Without it every task writes into every hour it holds, 8 tasks
    x 24 hours of small files: the events write takes about twice as long on 2,000,000 events
    (measured), and readers get many small files. The metrics are observed after that shuffle: in
    Spark 3.5 an observation below a shuffle in a write is never reported, and `Observation.get`
    waits forever.
    """
    observed, observation = observe(rows.repartition(*partition_by), {"rows": F.count(F.lit(1)), **(metrics or {})})
    write_partitions(observed, path, partition_by, options)
    return values(observation)


def write_partitions(
    rows: DataFrame, path: str, partition_by: list[str], options: dict[str, str] | None = None
) -> None:
    """Write `rows` as Parquet under `path`, replacing only the partitions they fall in; `options` go to the writer."""
    writer = rows.write.mode("overwrite").options(**(options or {})).option("partitionOverwriteMode", "dynamic")
    writer.partitionBy(*partition_by).parquet(path)


def summarize(
    params: PipelineParams,
    *,
    rows_read: int,
    quarantined: dict[str, int],
    duplicates_dropped: int,
    late_accepted: int,
    rows_written: dict[str, int],
    seconds: dict[str, float],
) -> dict[str, Any]:
    """The run's summary for the workflow and the lease: only str, int, float, list and dict values.

    Its size is bounded (paths are at most `MAX_PATH_CHARS`), well under 4 KB.
    """
    partition = f"date={params.date}"
    return {
        "date": params.date,
        "rows_read": rows_read,
        "quarantined": quarantined,
        "duplicates_dropped": duplicates_dropped,
        "late_accepted": late_accepted,
        "rows_written": rows_written,
        "outputs": {
            EVENTS: _join(params.output, EVENTS, partition),
            USER_HOURLY: _join(params.output, USER_HOURLY, partition),
            TYPE_DAILY: _join(params.output, TYPE_DAILY, partition),
            QUARANTINE: _join(params.quarantine, partition),
        },
        "seconds": seconds,
    }


def day_start(params: PipelineParams) -> dt.datetime:
    """Midnight UTC of the run's date, an aware datetime (Spark turns it into an instant, whatever its zone)."""
    return dt.datetime.combine(params.day, dt.time(), tzinfo=dt.UTC)


class StageClock:
    """Wall seconds per named stage, plus their total."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._started = time.perf_counter()

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            now = time.perf_counter()
            self.seconds[stage] = round(now - started, 3)
            self.seconds["total"] = round(now - self._started, 3)


def _blank(column: Column) -> Column:
    return column.isNull() | (F.trim(column) == "")


def _count(condition: Column) -> Column:
    """How many rows meet `condition`."""
    return F.count(F.when(condition, True))


def _join(root: str, *names: str) -> str:
    return "/".join([root.rstrip("/"), *names])
