"""The events pipeline on a local SparkSession: exact counts, quarantine rules, de-duplication, idempotence."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DecimalType, IntegerType, LongType, StringType, StructField, StructType

from longjobs.pipeline.job import NEARLY_UNIQUE_COLUMNS, TIME_PARSER_POLICY, read_events, run, user_hourly_rows
from longjobs.pipeline.schema import (
    AMOUNT_TYPE,
    CORRUPT_COLUMN,
    EVENTS,
    MALFORMED,
    MISSING_FIELD,
    MISSING_ID,
    NEGATIVE_AMOUNT,
    OUT_OF_WINDOW,
    PARSE_SCHEMA,
    REVENUE_TYPE,
    TYPE_DAILY,
    USER_HOURLY,
)
from tests.pipeline.conftest import DATE, Run, params_under, write_lines


def event(event_id: str | None, ts: str, *, amount: Any = 1.5, type: str = "purchase", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"user_id": "u-1", "session_id": "s-1", "ts": ts, "type": type, "amount": amount}
    if event_id is not None:
        body["event_id"] = event_id
    return {**body, **fields}


def _event_id(line: str) -> str:
    """The event id of a quarantined line ("" when it has none), or the line itself when it is no JSON object."""
    try:
        parsed = json.loads(line)
    except ValueError:
        return line
    return str(parsed.get("event_id") or "") if isinstance(parsed, dict) else line


def test_run_summary_matches_generated_truth(generated_run: Run) -> None:
    truth, summary = generated_run.manifest, generated_run.summary
    assert summary["rows_read"] == truth.events
    assert summary["quarantined"] == {
        MALFORMED: truth.malformed,
        MISSING_ID: truth.missing_id,
        MISSING_FIELD: truth.missing_field,
        NEGATIVE_AMOUNT: truth.negative_amount,
        OUT_OF_WINDOW: truth.out_of_window,
    }
    assert summary["duplicates_dropped"] == truth.duplicates
    assert summary["late_accepted"] == truth.late_accepted
    assert summary["rows_written"][EVENTS] == truth.unique_valid
    assert summary["rows_written"]["quarantine"] == sum(summary["quarantined"].values())
    # the generator makes some of each kind, so every count above is a real check
    assert min(truth.malformed, truth.duplicates, truth.missing_id, truth.out_of_window, truth.late_accepted) > 0


def test_run_outputs_match_generated_truth(spark: SparkSession, generated_run: Run) -> None:
    truth, params = generated_run.manifest, generated_run.params
    events = spark.read.parquet(f"{params.output}/{EVENTS}")
    by_type = {row["type"]: row["count"] for row in events.groupBy("type").count().collect()}
    assert by_type == truth.by_type
    assert events.select("event_id").distinct().count() == truth.unique_valid

    hourly = spark.read.parquet(f"{params.output}/{USER_HOURLY}")
    totals = hourly.agg(F.sum("events"), F.sum("purchases"), F.sum("revenue")).first()
    assert totals is not None
    assert (totals[0], totals[1]) == (truth.unique_valid, truth.by_type["purchase"])
    assert totals[2] == Decimal(truth.revenue_cents) / 100
    sessions = hourly.agg(F.sum("sessions")).first()
    assert sessions is not None
    assert sessions[0] == events.select("hour", "user_id", "session_id").distinct().count()
    assert hourly.count() == generated_run.summary["rows_written"][USER_HOURLY]
    assert {row["hour"] for row in hourly.select("hour").distinct().collect()} <= set(range(24))

    daily = {row["type"]: row for row in spark.read.parquet(f"{params.output}/{TYPE_DAILY}").collect()}
    assert {name: row["events"] for name, row in daily.items()} == truth.by_type
    assert daily["purchase"]["amount_total"] == Decimal(truth.revenue_cents) / 100

    quarantine = spark.read.parquet(params.quarantine)
    reasons = {row["reason"]: row["count"] for row in quarantine.groupBy("reason").count().collect()}
    assert reasons == {k: v for k, v in generated_run.summary["quarantined"].items() if v}


ANSI = "spark.sql.ansi.enabled"
"""Spark 4 (Glue 6.0, offline) runs SQL in ANSI mode by default: an invalid cast or an overflow raises instead
of giving null. Spark 3.5 (Glue 5.x) does not. The pipeline must quarantine the same rows under both."""


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_run_quarantines_each_rule_with_its_reason(spark: SparkSession, tmp_path: Path, ansi: str) -> None:
    default = spark.conf.get(ANSI)
    spark.conf.set(ANSI, ansi)
    try:
        _quarantines_each_rule(spark, tmp_path)
    finally:
        spark.conf.set(ANSI, default)
    assert default == "true", "the local session runs as Glue 6.0 does: ANSI mode on"


def _quarantines_each_rule(spark: SparkSession, tmp_path: Path) -> None:
    write_lines(
        tmp_path / "raw",
        [
            event("ok", "2024-05-01T10:00:00Z"),
            '{"event_id": "cut", "user_id": "u-1", "ts": "2024-05-01T1',
            "<html>503</html>",
            event("bad-amount", "2024-05-01T10:00:00Z", amount="n/a"),
            event("huge-amount", "2024-05-01T10:00:00Z", amount=1e40),  # past the decimal type: an overflow
            event("bad-ts", "yesterday"),
            event(None, "2024-05-01T10:00:00Z"),
            event("  ", "2024-05-01T10:00:00Z"),
            event("no-user", "2024-05-01T10:00:00Z", user_id=None),
            event("no-type", "2024-05-01T10:00:00Z", type=""),
            event("negative", "2024-05-01T10:00:00Z", amount=-0.01),
            event(None, "2024-05-01T10:00:00Z", amount=-5),
            event("tomorrow", "2024-05-02T00:00:00Z"),
            event("too-early", "2024-04-30T22:59:59.999Z"),
        ],
    )
    params = params_under(tmp_path, lateness_minutes=60)
    summary = run(spark, params)

    rows = spark.read.parquet(params.quarantine).collect()
    # a line that could not be parsed is kept as it was; a parsed reject as its event
    reasons = sorted((_event_id(row["line"]), row["reason"]) for row in rows)
    assert reasons == sorted(
        [
            ("<html>503</html>", MALFORMED),
            ('{"event_id": "cut", "user_id": "u-1", "ts": "2024-05-01T1', MALFORMED),
            ("bad-amount", MALFORMED),
            ("huge-amount", MALFORMED),
            ("bad-ts", MALFORMED),
            ("", MISSING_ID),
            ("", MISSING_ID),  # a missing id is checked before the amount
            ("  ", MISSING_ID),
            ("no-user", MISSING_FIELD),
            ("no-type", MISSING_FIELD),
            ("negative", NEGATIVE_AMOUNT),
            ("tomorrow", OUT_OF_WINDOW),
            ("too-early", OUT_OF_WINDOW),
        ]
    )
    assert all(row["source_file"].endswith("part-00000.jsonl") and str(row["date"]) == DATE for row in rows)
    assert summary["quarantined"] == {
        MALFORMED: 5,
        MISSING_ID: 3,
        MISSING_FIELD: 2,
        NEGATIVE_AMOUNT: 1,
        OUT_OF_WINDOW: 2,
    }
    assert summary["rows_written"][EVENTS] == 1


def test_run_accepts_late_events_within_lateness_into_hour_zero(spark: SparkSession, tmp_path: Path) -> None:
    write_lines(
        tmp_path / "raw",
        [
            event("edge-late", "2024-04-30T23:30:00Z"),  # exactly the lateness before the day: accepted
            event("too-late", "2024-04-30T23:29:59.999Z"),
            event("last", "2024-05-01T23:59:59.999Z"),
            event("zoned", "2024-05-01T12:30:00+02:00"),  # 10:30 UTC
        ],
    )
    params = params_under(tmp_path, lateness_minutes=30)
    summary = run(spark, params)

    hours = {row["event_id"]: row["hour"] for row in spark.read.parquet(f"{params.output}/{EVENTS}").collect()}
    assert hours == {"edge-late": 0, "last": 23, "zoned": 10}
    assert summary["late_accepted"] == 1
    assert summary["quarantined"][OUT_OF_WINDOW] == 1


def test_run_keeps_the_latest_copy_of_a_duplicate(spark: SparkSession, tmp_path: Path) -> None:
    write_lines(
        tmp_path / "raw",
        [
            event("dup", "2024-05-01T09:59:00Z", amount=1.00),
            event("dup", "2024-05-01T11:00:00Z", amount=7.25),
            event("dup", "2024-05-01T10:30:00Z", amount=3.00),
            event("same", "2024-05-01T08:00:00Z", amount=2.00),
            event("same", "2024-05-01T08:00:00Z", amount=2.00),
        ],
    )
    params = params_under(tmp_path)
    summary = run(spark, params)

    kept = {row["event_id"]: row for row in spark.read.parquet(f"{params.output}/{EVENTS}").collect()}
    assert set(kept) == {"dup", "same"}
    assert (kept["dup"]["amount"], kept["dup"]["hour"]) == (Decimal("7.25"), 11)
    assert summary["duplicates_dropped"] == 3
    hourly = spark.read.parquet(f"{params.output}/{USER_HOURLY}").collect()
    assert {(row["hour"], row["events"], row["purchases"], row["revenue"]) for row in hourly} == {
        (8, 1, 1, Decimal("2.00")),
        (11, 1, 1, Decimal("7.25")),
    }


def test_run_twice_gives_the_same_output_and_leaves_other_dates(spark: SparkSession, tmp_path: Path) -> None:
    write_lines(tmp_path / "raw", [event("a1", "2024-05-01T01:00:00Z"), event("a2", "2024-05-01T02:00:00Z")])
    other_day = write_lines(tmp_path / "raw-other", [event("b1", "2024-05-02T05:00:00Z")])
    first = params_under(tmp_path)
    other = params_under(tmp_path, date="2024-05-02", input=str(other_day))

    def snapshot() -> dict[str, list[tuple[Any, ...]]]:
        return {
            name: sorted(tuple(row) for row in spark.read.parquet(f"{first.output}/{name}").collect())
            for name in (EVENTS, USER_HOURLY, TYPE_DAILY)
        }

    summary = run(spark, first)
    run(spark, other)
    before = snapshot()
    again = run(spark, first)

    assert snapshot() == before
    dates = {str(row["date"]) for row in spark.read.parquet(f"{first.output}/{EVENTS}").select("date").collect()}
    assert dates == {DATE, "2024-05-02"}
    assert {k: v for k, v in again.items() if k != "seconds"} == {k: v for k, v in summary.items() if k != "seconds"}
    # each output partition is one file, and the re-run replaced it rather than adding another
    hours = sorted(Path(first.output, EVENTS, f"date={DATE}").iterdir())
    assert [hour.name for hour in hours] == ["hour=1", "hour=2"]
    assert all(len(list(hour.glob("*.parquet"))) == 1 for hour in hours)


def test_run_summary_is_small_json(generated_run: Run) -> None:
    text = json.dumps(generated_run.summary)
    assert len(text) < 4_096
    assert json.loads(text) == generated_run.summary
    assert generated_run.summary["outputs"][EVENTS].endswith(f"/{EVENTS}/date={DATE}")
    assert set(generated_run.summary["seconds"]) == {
        "read_quarantine",
        "dedupe_events",
        USER_HOURLY,
        TYPE_DAILY,
        "total",
    }


def test_user_hourly_counts_each_session_once_and_keeps_its_types(spark: SparkSession) -> None:
    columns = [("hour", IntegerType()), ("user_id", StringType())]
    columns += [("session_id", StringType()), ("type", StringType()), ("amount", AMOUNT_TYPE)]
    schema = StructType([StructField(name, kind) for name, kind in columns])
    rows = [
        (3, "u-1", "s-1", "view", Decimal("0.00")),
        (3, "u-1", "s-1", "purchase", Decimal("5.10")),
        (3, "u-1", "s-2", "purchase", Decimal("2.25")),
        (3, "u-1", "s-3", "click", Decimal("0.00")),
        (4, "u-1", "s-1", "view", Decimal("0.00")),  # the same session in the next hour counts there
        (3, "u-2", "s-1", "view", Decimal("9.99")),  # not a purchase: no revenue
    ]
    hourly = user_hourly_rows(spark.createDataFrame(rows, schema))

    found = {(row["hour"], row["user_id"]): tuple(row)[2:] for row in hourly.collect()}
    assert found == {
        (3, "u-1"): (4, 3, 2, Decimal("7.35")),
        (4, "u-1"): (1, 1, 0, Decimal("0.00")),
        (3, "u-2"): (1, 1, 0, Decimal("0.00")),
    }
    types = {field.name: field.dataType for field in hourly.schema.fields}
    assert [types[name] for name in ("events", "sessions", "purchases")] == [LongType()] * 3
    assert types["revenue"] == REVENUE_TYPE == DecimalType(22, 2)


def test_run_writes_events_plain_for_near_unique_columns_and_int64_timestamps(
    spark: SparkSession, generated_run: Run
) -> None:
    """The Parquet footer of one events file: what `PLAIN_ENCODED` and `SESSION_CONF` promise."""
    folder = Path(generated_run.params.output) / EVENTS / f"date={DATE}" / "hour=5"
    (path,) = folder.glob("part-*.parquet")
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    footer = jvm.org.apache.parquet.hadoop.ParquetFileReader.readFooter(
        spark.sparkContext._jsc.hadoopConfiguration(), jvm.org.apache.hadoop.fs.Path(str(path))
    )
    assert "int64 ts (TIMESTAMP(MICROS,true))" in str(footer.getFileMetaData().getSchema().getType("ts"))
    encodings = {
        str(column.getPath().toDotString()): {str(encoding) for encoding in column.getEncodings()}
        for block in footer.getBlocks()
        for column in block.getColumns()
    }
    dictionary = {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}
    assert all(not encodings[name] & dictionary for name in NEARLY_UNIQUE_COLUMNS)
    assert encodings["user_id"] & dictionary  # the other columns keep Spark's default


TIMESTAMP_FORMS = [
    "2024-05-01T13:45:12.123Z",  # the fast path
    "2024-05-01T13:45:12.123+02:00",  # the fast path, with an offset
    "2024-05-01T13:45:12Z",
    "2024-05-01T13:45:12.123456Z",
    "2024-05-01 13:45:12.1-05:30",
    "2024-05-01T13:45:12.123",  # no zone: the session's
    "2024-05-01",
    "2024-05-01T25:00:00.000Z",  # no such hour: Spark 2's parser took it
    "2024-02-30T10:00:00.000Z",  # no such day
    "yesterday",
]


def _timestamps(frame: Any) -> dict[str, tuple[Any, bool]]:
    """Per event id: the timestamp read (as UTC text) and whether the line was malformed."""
    rows = frame.select("event_id", F.col("ts").cast("string"), F.col(CORRUPT_COLUMN).isNotNull()).collect()
    return {row[0]: (row[1], row[2]) for row in rows}


def test_read_events_reads_every_timestamp_form_as_spark_default_does(spark: SparkSession, tmp_path: Path) -> None:
    """The fast timestamp format changes nothing: other forms fall back, invalid ones stay malformed."""
    folder = write_lines(tmp_path / "raw", [event(f"e{index}", form) for index, form in enumerate(TIMESTAMP_FORMS)])
    default = spark.read.schema(PARSE_SCHEMA).option("columnNameOfCorruptRecord", CORRUPT_COLUMN).json(str(folder))

    found = _timestamps(read_events(spark, str(folder)))

    assert found == _timestamps(default)
    assert [found[f"e{index}"][1] for index in range(len(TIMESTAMP_FORMS))] == [False] * 7 + [True] * 3
    utc = read_events(spark, str(folder)).where(F.col("event_id") == "e1").select(F.unix_micros("ts")).first()
    assert utc is not None and utc[0] == 1_714_563_912_123_000  # 11:45:12.123 UTC


def test_read_events_keeps_default_parsing_under_spark_default_policy(spark: SparkSession, tmp_path: Path) -> None:
    """On a session without `SESSION_CONF`, an hour of 25 is quarantined, not a failed job."""
    folder = write_lines(tmp_path / "raw", [event(f"e{index}", form) for index, form in enumerate(TIMESTAMP_FORMS)])
    corrected = _timestamps(read_events(spark, str(folder)))
    spark.conf.set(TIME_PARSER_POLICY, "EXCEPTION")
    try:
        assert _timestamps(read_events(spark, str(folder))) == corrected
    finally:
        spark.conf.set(TIME_PARSER_POLICY, "CORRECTED")
