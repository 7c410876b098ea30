"""DynamoDB's typed attribute values for the few types a lease holds, both ways.

boto3's `TypeSerializer` does this for every type, but importing it imports boto3 (and s3transfer),
which the functions otherwise do without (see `longjobs.engine.aws`). Numbers are `Decimal`, as boto3's.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any


def serialize(value: Any) -> dict[str, Any]:
    """`{"S": ...}`, `{"N": ...}`, `{"BOOL": ...}`, `{"NULL": True}`, `{"M": ...}` or `{"L": ...}`."""
    if value is None:
        return {"NULL": True}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, int | Decimal):
        return {"N": str(value)}
    if isinstance(value, float):
        raise TypeError("floats are not DynamoDB numbers: pass a Decimal")
    if isinstance(value, Mapping):
        return {"M": {str(key): serialize(item) for key, item in value.items()}}
    if isinstance(value, list | tuple):
        return {"L": [serialize(item) for item in value]}
    raise TypeError(f"cannot store a {type(value).__name__} in DynamoDB")


def deserialize(attribute: Mapping[str, Any]) -> Any:
    """The plain value of a typed attribute value (numbers as `Decimal`)."""
    [(kind, value)] = attribute.items()
    if kind == "S":
        return value
    if kind == "N":
        return Decimal(value)
    if kind == "BOOL":
        return bool(value)
    if kind == "NULL":
        return None
    if kind == "M":
        return {key: deserialize(item) for key, item in value.items()}
    if kind == "L":
        return [deserialize(item) for item in value]
    if kind in ("SS", "BS", "B"):
        return set(value) if kind != "B" else value
    if kind == "NS":
        return {Decimal(item) for item in value}
    raise TypeError(f"unknown DynamoDB type {kind!r}")
