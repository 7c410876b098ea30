"""Changing SQS message visibility, with every failure classified."""

from __future__ import annotations

from longjobs.engine.visibility.client import BATCH_LIMIT, ChangeOutcome, VisibilityChange, VisibilityClient
from longjobs.engine.visibility.errors import FailureClass, classify, classify_exception

__all__ = [
    "BATCH_LIMIT",
    "ChangeOutcome",
    "FailureClass",
    "VisibilityChange",
    "VisibilityClient",
    "classify",
    "classify_exception",
]
