"""The one error type the command reports: a one-line cause and an exit code."""

from __future__ import annotations

from botocore.exceptions import BotoCoreError, ClientError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class CliError(Exception):
    """A failure the user can act on: printed as `longjobs: <message>`, no traceback."""

    def __init__(self, message: str, *, code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


class UsageError(CliError):
    """Arguments that do not make sense together (exit code 2, as argparse's own)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code=EXIT_USAGE)


def call_error_text(exc: ClientError | BotoCoreError) -> str:
    """A failed call as one line: the AWS error's `<code>: <message>`, or botocore's own error (no answer)."""
    if not isinstance(exc, ClientError):
        return f"{type(exc).__name__}: {exc}"
    error = exc.response.get("Error", {})
    code = error.get("Code", "error")
    message = " ".join(str(error.get("Message", "")).split())
    if message.startswith("<"):  # botocore passes on the body of an answer it could not parse
        message = "the answer is a web page, not an AWS service's: is the endpoint URL the local service's?"
    return f"{code}: {message}" if message else str(code)


def client_error_text(exc: ClientError) -> str:
    """An AWS error as one line: `<operation> failed: <code>: <message>`."""
    return f"{exc.operation_name} failed: {call_error_text(exc)}"
