"""The raw event's schema, the quarantine reasons and the names of the pipeline's outputs.

A raw event is one JSON object per line:

    {"event_id": "e-20240501-000000001", "user_id": "u-000042", "session_id": "s-000042-27",
     "ts": "2024-05-01T13:45:12.123Z", "type": "purchase", "amount": 12.34}

`ts` is ISO-8601 and should carry its zone (`Z` or `+hh:mm`); Spark reads a timestamp without one
in the session's time zone. `amount` is money: a decimal with two places (more are rounded half up),
so sums are exact and a re-run writes the same revenue to the cent.
"""

from __future__ import annotations

from pyspark.sql.types import DecimalType, StringType, StructField, StructType, TimestampType

CORRUPT_COLUMN = "_corrupt_record"
"""Where `from_json` in PERMISSIVE mode puts a line it cannot parse into the schema."""

AMOUNT_TYPE = DecimalType(12, 2)
REVENUE_TYPE = DecimalType(22, 2)  # what Spark's sum of decimal(12, 2) gives

EVENT_FIELDS = ("event_id", "user_id", "session_id", "ts", "type", "amount")
EVENT_SCHEMA = StructType(
    [
        StructField("event_id", StringType()),
        StructField("user_id", StringType()),
        StructField("session_id", StringType()),
        StructField("ts", TimestampType()),
        StructField("type", StringType()),
        StructField("amount", AMOUNT_TYPE),
    ]
)
PARSE_SCHEMA = StructType([*EVENT_SCHEMA.fields, StructField(CORRUPT_COLUMN, StringType())])

# Quarantine reasons, in the order they are checked: a row gets the first that applies.
MALFORMED = "malformed"
"""Not a JSON object, or a field of the wrong type (an amount that is no number, a timestamp that is no time)."""
MISSING_ID = "missing_id"
"""`event_id` absent, null or blank."""
MISSING_FIELD = "missing_field"
"""Another field absent, null or blank: every event has a user, a session, a timestamp, a type and an amount."""
NEGATIVE_AMOUNT = "negative_amount"
OUT_OF_WINDOW = "ts_out_of_window"
"""`ts` before the partition's UTC day less the lateness, or at or after the day's end."""
REASONS = (MALFORMED, MISSING_ID, MISSING_FIELD, NEGATIVE_AMOUNT, OUT_OF_WINDOW)

PURCHASE = "purchase"

# Output datasets under the `output` parameter; the quarantine is its own parameter.
EVENTS = "events"
USER_HOURLY = "user_hourly"
TYPE_DAILY = "type_daily"
QUARANTINE = "quarantine"
