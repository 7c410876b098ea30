"""Classifying SQS visibility errors the way real SQS reports them.

Real SQS (JSON protocol) puts a short code in `Error.Code` and the legacy query code
(`AWS.SimpleQueueService.MessageNotInflight`) in `Error.QueryErrorCode`; batch entries carry only a
`Code` and a `Message`. Several distinct situations share `InvalidParameterValue` and differ only by
message text, so both the codes and the message are read.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from botocore.exceptions import ClientError, ConnectionError, HTTPClientError

_QUERY_PREFIX = "AWS.SimpleQueueService."


class FailureClass(StrEnum):
    LOST = "lost"  # the handle is no longer valid: the message was deleted, received again or expired
    CAPPED = "capped"  # the 12 hour visibility limit of this receive is reached
    THROTTLED = "throttled"  # throttling or a transient service/network fault: retry later
    OTHER = "other"  # anything else: keep the lease, note the error, try at the next tick


_LOST_CODES = frozenset({"ReceiptHandleIsInvalid", "MessageNotInflight", "QueueDoesNotExist", "NonExistentQueue"})
_THROTTLED_CODES = frozenset(
    {
        "RequestThrottled",
        "ThrottlingException",
        "Throttling",
        "KmsThrottled",
        "ServiceUnavailable",
        "InternalError",
        "InternalFailure",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
_LOST_PHRASES = ("does not exist", "not available", "expired", "not a valid receipt handle")
_CAPPED_PHRASES = ("beyond the limit", "exceeds the maximum")


def _short(code: str | None) -> str:
    """`AWS.SimpleQueueService.MessageNotInflight;Sender` -> `MessageNotInflight`."""
    if not code:
        return ""
    code = code.split(";", 1)[0]
    return code.removeprefix(_QUERY_PREFIX)


def classify(
    code: str | None,
    message: str | None = None,
    *,
    query_code: str | None = None,
    http_status: int | None = None,
) -> FailureClass:
    """The class of one failure, from its code(s), message and HTTP status."""
    codes = {_short(code), _short(query_code)} - {""}
    text = (message or "").lower()
    if codes & _THROTTLED_CODES or (http_status is not None and (http_status >= 500 or http_status == 429)):
        return FailureClass.THROTTLED
    if codes & _LOST_CODES:
        return FailureClass.LOST
    # Several refusals share a generic code and differ only by their text: a stale or expired handle
    # ("lost"), or the 12 h limit ("capped"). Some front ends answer them as `ValidationException`
    # without the query-error header, so that code is read the same way.
    if codes & {
        "InvalidParameterValue",
        "InvalidParameterValueException",
        "InvalidParameterValues",
        "ValidationException",
        "ValidationError",
    }:
        if any(phrase in text for phrase in _CAPPED_PHRASES):
            return FailureClass.CAPPED
        if any(phrase in text for phrase in _LOST_PHRASES):
            return FailureClass.LOST
    return FailureClass.OTHER


def classify_exception(exc: BaseException) -> FailureClass:
    """The class of an exception raised by a botocore call."""
    if isinstance(exc, ClientError):
        error: dict[str, Any] = dict(exc.response.get("Error", {}))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return classify(
            error.get("Code"), error.get("Message"), query_code=error.get("QueryErrorCode"), http_status=status
        )
    if isinstance(exc, ConnectionError | HTTPClientError):
        return FailureClass.THROTTLED
    return FailureClass.OTHER


def describe_exception(exc: BaseException) -> str:
    """A short `Code: message` text for logs and the lease's last error."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', 'Unknown')}: {error.get('Message', '')}".strip()
    return f"{type(exc).__name__}: {exc}"
