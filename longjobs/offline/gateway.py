"""The local service's front door: moto's WSGI application, with what moto lacks or gets wrong put right.

- SQS's message move tasks (`StartMessageMoveTask`, `ListMessageMoveTasks`, `CancelMessageMoveTask`) are
  answered by `longjobs.offline.movetasks`.
- `SendTaskFailure` keeps its `cause`: moto's handler passes on the error alone, so a failed task's cause
  never reached the execution history, the workflow's `Catch` (`$.error.Cause`) or the lease. Here the
  call goes to moto's Step Functions engine with both, as AWS records them.
- `StopExecution` keeps its `error` and `cause`: moto's handler stops the execution with neither, so a
  cancelled job's execution showed no `Cancelled` error. Here a running execution is stopped with both:
  in its `ExecutionAborted` event (`ExecutionAbortedEventDetails`), and in `DescribeExecution`, as the
  simulation's Step Functions answers too.
- An operation the service does not implement answers an AWS-shaped error that names it (SQS's JSON
  protocol: `{"__type": "com.amazonaws.sqs#UnsupportedOperation", "message": ...}` with the
  `x-amzn-query-error` header the SDKs read; the query protocol: an XML `ErrorResponse`), status 400, never
  moto's HTML 500 page, which the SDKs retry four times and then report as an unknown 500. Any other
  failure inside moto answers `InternalFailure` (500) in the same shape.
- DynamoDB's requests are answered one at a time. moto's `TransactWriteItems` copies the whole table when
  it begins and, when it is cancelled (a condition lost its race), restores that copy: a write another
  client made meanwhile is erased (docs/moto.md). The extender's renewal transaction is cancelled when a
  job's end raced it, so under load it would erase that job's SUCCEEDED close, and the run would report a
  job that succeeded as a lost message. One at a time, a transaction is atomic with every other request,
  as DynamoDB's is.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs
from xml.sax.saxutils import escape

from botocore.model import OperationNotFoundError

from longjobs.offline.movetasks import MoveTaskError, MoveTasks
from longjobs.offline.resources import ACCOUNT, REGION

log = logging.getLogger(__name__)

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
StartResponse = Callable[..., Any]

SQS_PREFIX = "AmazonSQS"
DYNAMODB_PREFIX = "DynamoDB_"
"""The start of DynamoDB's `X-Amz-Target` (`DynamoDB_20120810.TransactWriteItems`)."""
JSON_10 = "application/x-amz-json-1.0"
SQS_QUERY_CODES = {"UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation"}
"""SQS's query-protocol code where it differs from the JSON shape's name."""
WATCHED_SQS_OPERATIONS = frozenset({"CreateQueue", "SetQueueAttributes"})
"""After these a queue may have become a DLQ: the move tasks start recording where its messages come from."""
CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/[^/]+/([^/]+)/")


class Gateway:
    """WSGI middleware in front of moto's application (see the module's docstring)."""

    def __init__(self, app: WSGIApp, move_tasks: MoveTasks | None = None) -> None:
        self._app = app
        self.move_tasks = move_tasks or MoveTasks()
        self._dynamodb = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        prefix, _, operation = target.rpartition(".")
        if environ.get("PATH_INFO") == "/moto-api/reset":
            self.move_tasks.stop()
        if prefix == SQS_PREFIX and operation in MOVE_TASK_OPERATIONS:
            return self._move_task(operation, environ, start_response)
        if target in STEP_FUNCTIONS_FIXES:
            answered = STEP_FUNCTIONS_FIXES[target](self, environ, start_response)
            if answered is not None:
                return answered
        if not target:
            _body(environ)  # a query-protocol error names the form's `Action`, after moto has read the form
        response: Iterable[bytes]
        try:
            if prefix.startswith(DYNAMODB_PREFIX):
                with self._dynamodb:  # moto's transactions are atomic only one request at a time
                    response = list(self._app(environ, start_response))
            else:
                response = self._app(environ, start_response)
        except (NotImplementedError, OperationNotFoundError):  # moto lacks it; or no AWS service has it
            return _error(environ, start_response, "UnsupportedOperation", _unsupported(environ), 400)
        except Exception as exc:  # moto's own failure: an AWS-shaped 500, logged with its traceback
            log.exception("the local service failed on %s", _operation(environ) or environ.get("PATH_INFO"))
            message = f"{_operation(environ) or 'the request'} failed in the local service: {type(exc).__name__}: {exc}"
            return _error(environ, start_response, "InternalFailure", message, 500)
        if prefix == SQS_PREFIX and operation in WATCHED_SQS_OPERATIONS:
            account, region = _caller(environ)
            self.move_tasks.watch(self.move_tasks.backends(account, region))
        return response

    def _move_task(self, operation: str, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        try:
            request = json.loads(_body(environ) or b"{}")
            if not isinstance(request, dict):
                raise MoveTaskError("InvalidParameterValue", "The request body must be a JSON object.")
            result = MOVE_TASK_OPERATIONS[operation](self.move_tasks, request)
        except ValueError:
            return _error(environ, start_response, "InvalidParameterValue", "The request body is not JSON.", 400)
        except MoveTaskError as exc:
            return _error(environ, start_response, exc.code, exc.message, exc.status, query_code=exc.query_code)
        return _respond(start_response, 200, JSON_10, json.dumps(result).encode())

    def _send_task_failure(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes] | None:
        """Fail the task with its error and cause; None (moto's own handler answers, with its error) when
        the engine refuses the token."""
        request = _json_request(environ)
        token = request.get("taskToken") if request is not None else None
        if request is None or not isinstance(token, str):
            return None
        from moto.stepfunctions.responses import get_backend

        account, region = _caller(environ)
        engine: Any = get_backend(account, region)  # the workflow engine's own `send_task_failure` takes the cause
        try:
            engine.send_task_failure(token, error=request.get("error"), cause=request.get("cause"))
        except Exception:
            return None
        return _respond(start_response, 200, JSON_10, b"{}")

    def _stop_execution(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes] | None:
        """Stop a running execution with its error and cause; None (moto's own handler answers) for any
        other: one that does not exist, or has ended. An execution stays RUNNING until its workflow's thread
        sees the stop: a stop meanwhile (a second one, or one as the workflow ends) changes nothing. It
        leaves `DescribeExecution`'s error and cause to the stop, or the end, that took effect, and answers
        that stop's date."""
        request = _json_request(environ)
        arn = request.get("executionArn") if request is not None else None
        if request is None or not isinstance(arn, str):
            return None
        from moto.stepfunctions.responses import get_backend

        account, region = _caller(environ)
        engine: Any = get_backend(account, region)
        error, cause = request.get("error"), request.get("cause")
        try:  # moto's workflow engine, whose internals may move: any surprise leaves the stop to moto's handler
            from moto.stepfunctions.parser.asl.eval.program_state import ProgramStopped

            [execution] = [e for e in engine._get_executions() if e.execution_arn == arn and e.status == "RUNNING"]
            stopped = datetime.now(UTC)
            execution.stop(stop_date=stopped, error=error, cause=cause)
            state = execution.exec_worker.env.program_state()  # the engine's stop acts only on a running program
        except Exception:
            return None
        if not isinstance(state, ProgramStopped):  # it ended meanwhile: moto answers, as for an ended one
            return None
        if (state.stop_date, state.error, state.cause) == (stopped, error, cause):
            execution.error, execution.cause = error, cause  # `DescribeExecution`'s
        stopped = state.stop_date  # an earlier stop's, when that one took effect
        return _respond(start_response, 200, JSON_10, json.dumps({"stopDate": stopped.timestamp()}).encode())


STEP_FUNCTIONS_FIXES: dict[str, Callable[[Gateway, dict[str, Any], StartResponse], Iterable[bytes] | None]] = {
    "AWSStepFunctions.SendTaskFailure": Gateway._send_task_failure,
    "AWSStepFunctions.StopExecution": Gateway._stop_execution,
}
"""The Step Functions calls whose error and cause moto's handlers drop, answered here with them."""


def _json_request(environ: dict[str, Any]) -> dict[str, Any] | None:
    """The request's JSON object, or None when its body is not one."""
    try:
        request = json.loads(_body(environ) or b"{}")
    except ValueError:
        return None
    return request if isinstance(request, dict) else None


MOVE_TASK_OPERATIONS: dict[str, Callable[[MoveTasks, Mapping[str, Any]], dict[str, Any]]] = {
    "StartMessageMoveTask": MoveTasks.start,
    "ListMessageMoveTasks": MoveTasks.list_tasks,
    "CancelMessageMoveTask": MoveTasks.cancel,
}


BODY_KEY = "longjobs.body"


def _body(environ: dict[str, Any]) -> bytes:
    """The request's body, read once (kept in the environ) and put back for whatever reads it next."""
    if BODY_KEY not in environ:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        environ[BODY_KEY] = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(environ[BODY_KEY])
    body: bytes = environ[BODY_KEY]
    return body


def _caller(environ: dict[str, Any]) -> tuple[str, str]:
    """The account and region a request is for, as moto derives them (its default account for any key it
    does not know)."""
    found = CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
    if found is None:
        return ACCOUNT, REGION
    from moto.iam.models import get_account_id_from

    return get_account_id_from(found.group(1)), found.group(2)


def _query(environ: dict[str, Any]) -> dict[str, list[str]]:
    """The query protocol's parameters (`Action=...`), from the query string or a form body."""
    values = parse_qs(environ.get("QUERY_STRING", ""))
    if "x-www-form-urlencoded" in environ.get("CONTENT_TYPE", ""):
        values.update(parse_qs(_body(environ).decode("utf-8", "replace")))
    return values


def _operation(environ: dict[str, Any]) -> str:
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        return str(target.rpartition(".")[2])
    return (_query(environ).get("Action") or [""])[0]


def _unsupported(environ: dict[str, Any]) -> str:
    operation = _operation(environ)
    what = operation or f"{environ.get('REQUEST_METHOD', '')} {environ.get('PATH_INFO', '')}".strip()
    return f"{what} is not implemented by the local service (moto), so it cannot answer it."


def _error(
    environ: dict[str, Any],
    start_response: StartResponse,
    code: str,
    message: str,
    status: int,
    *,
    query_code: str | None = None,
) -> Iterable[bytes]:
    """An error in the request's protocol: JSON when it named its operation in `X-Amz-Target`, XML for
    the query protocol (`Action=`), JSON otherwise."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    sender = "Sender" if status < 500 else "Receiver"
    if not target and _query(environ).get("Action"):
        scope = CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", ""))
        if query_code is None and scope is not None and "/sqs/" in environ.get("HTTP_AUTHORIZATION", ""):
            query_code = SQS_QUERY_CODES.get(code)
        body = (
            f"<ErrorResponse><Error><Type>{sender}</Type><Code>{escape(query_code or code)}</Code>"
            f"<Message>{escape(message)}</Message></Error><RequestId>{uuid.uuid4()}</RequestId></ErrorResponse>"
        )
        return _respond(start_response, status, "text/xml", body.encode())
    headers = {"x-amzn-ErrorType": code}
    if target.startswith(SQS_PREFIX + "."):
        shape = f"com.amazonaws.sqs#{code}"
        headers["x-amzn-query-error"] = f"{query_code or SQS_QUERY_CODES.get(code, code)};{sender}"
    else:
        shape = code
    body_json = json.dumps({"__type": shape, "message": message}).encode()
    return _respond(start_response, status, JSON_10, body_json, headers)


def _respond(
    start_response: StartResponse,
    status: int,
    content_type: str,
    body: bytes,
    headers: Mapping[str, str] | None = None,
) -> Iterable[bytes]:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 500: "Internal Server Error"}.get(status, "Error")
    start_response(
        f"{status} {reason}",
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("x-amzn-RequestId", str(uuid.uuid4())),
            *(headers or {}).items(),
        ],
    )
    return [body]


__all__ = ["Gateway"]
