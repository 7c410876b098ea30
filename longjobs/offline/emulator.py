"""The AWS of the offline runtime: moto's threaded server on 127.0.0.1, state-machine execution on.

The functions reach it through ordinary boto3 clients: `environment()` points `AWS_ENDPOINT_URL` at
the server (and `MOTO_PORT`, which moto's Step Functions engine reads to call SQS and DynamoDB from
inside the workflow). The resources are made by `longjobs.offline.resources.create_resources`, the one builder
of local resources (the functional tests use it on moto in-process).

Every request the server answers is counted by operation, so a report can say what a run cost in API
calls. The runtime's own observation clients identify themselves (`OBSERVER_APP_ID` in the user
agent) and are left out of the count.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from moto.core.config import default_user_config
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from longjobs.offline.gateway import Gateway
from longjobs.offline.resources import (
    ACCOUNT,
    DLQ,
    QUEUE,
    REGION,
    STATE_MACHINE,
    TABLE,
    TOKEN_QUEUE,
    Resources,
    create_resources,
    workflow_definition,
)

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

    from longjobs.engine.jobs import JobCatalog
    from longjobs.engine.settings import Settings

__all__ = [
    "ACCOUNT",
    "DLQ",
    "QUEUE",
    "REGION",
    "STATE_MACHINE",
    "TABLE",
    "TOKEN_QUEUE",
    "Emulator",
    "PortInUseError",
    "Resources",
    "environment",
    "function_environment",
    "queue_messages",
    "watch_arrivals",
    "workflow_definition",
]

OBSERVER_APP_ID = "offline-observer"

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "offline",
    "AWS_SECRET_ACCESS_KEY": "offline",
    "AWS_SESSION_TOKEN": "offline",
    "AWS_DEFAULT_REGION": REGION,
}

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class ApiCounter:
    """WSGI middleware: counts each request by its operation (`X-Amz-Target` of the JSON protocols)."""

    def __init__(self, app: WSGIApp) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target and OBSERVER_APP_ID not in environ.get("HTTP_USER_AGENT", ""):
            with self._lock:
                self._counts[target.rpartition(".")[2]] += 1
        return self._app(environ, start_response)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(sorted(self._counts.items()))


class CountingMotoServer(ThreadedMotoServer):
    """moto's threaded server with the request counter and the gateway (`longjobs.offline.gateway`: SQS's
    move tasks, a task failure's cause, AWS-shaped errors for what moto lacks) in front of its application."""

    def __init__(self, ip_address: str, port: int) -> None:
        super().__init__(ip_address=ip_address, port=port, verbose=False)
        self.gateway = Gateway(DomainDispatcherApplication(create_backend_app))
        self.counter = ApiCounter(self.gateway)

    def _server_entry(self) -> None:
        # ThreadedMotoServer's own entry, with `self.counter` as the application.
        self._server = make_server(self._ip_address, self._port, self.counter, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


class PortInUseError(OSError):
    """The emulator's port is taken (another `serve`, LocalStack, ...)."""


class Emulator:
    """A started moto server and clients on it; `create()` makes the processor's resources."""

    def __init__(self, port: int = 0) -> None:
        """Start the server on 127.0.0.1:`port` (0: a free port the OS picks). Raises `PortInUseError`."""
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        if port:
            _check_free(port)
        self.server = CountingMotoServer("127.0.0.1", port)
        self.server.start()
        self.port: int = self.server.get_host_and_port()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._post("/moto-api/reset", {})
        # moto's configuration is process-wide (and copied by `mock_aws`): put it back on `stop()`. Its
        # API does not report the Step Functions part, so that is read in-process.
        self._saved_config = {"stepfunctions": dict(default_user_config["stepfunctions"])}
        self._post("/moto-api/config", {"stepfunctions": {"execute_state_machine": True}})

    def _post(self, path: str, body: Mapping[str, Any]) -> Any:
        request = urllib.request.Request(self.endpoint + path, data=json.dumps(body).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def session(self) -> boto3.session.Session:
        return boto3.session.Session(
            aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=REGION,
        )

    def client(self, service: str, *, app_id: str = OBSERVER_APP_ID) -> Any:
        """A client of the emulator; `app_id` tags its requests (the observer's are not counted)."""
        # botocore-stubs lags botocore here: `user_agent_appid` is a Config option since botocore 1.31.
        config = Config(user_agent_appid=app_id, retries={"mode": "standard", "max_attempts": 3})  # type: ignore[call-arg]
        return self.session().client(service, endpoint_url=self.endpoint, config=config)  # type: ignore[call-overload]

    def sqs(self, app_id: str = OBSERVER_APP_ID) -> SQSClient:
        client: SQSClient = self.client("sqs", app_id=app_id)
        return client

    def dynamodb(self) -> DynamoDBClient:
        client: DynamoDBClient = self.client("dynamodb")
        return client

    def stepfunctions(self, app_id: str = OBSERVER_APP_ID) -> SFNClient:
        client: SFNClient = self.client("stepfunctions", app_id=app_id)
        return client

    def api_calls(self) -> dict[str, int]:
        return self.server.counter.counts()

    def create(self, settings: Settings, *, spark_heartbeat_s: int, catalog: JobCatalog | None = None) -> Resources:
        """The processor's resources on this server (the lease table with a stream, for the observer)."""
        return create_resources(
            self.sqs(),
            self.dynamodb(),
            self.stepfunctions(),
            settings,
            spark_heartbeat_s=spark_heartbeat_s,
            catalog=catalog,
            table_stream=True,
        )

    def stop_executions(self, state_machine_arn: str) -> None:
        """Abort what still runs, so no engine thread outlives the server."""
        sfn = self.stepfunctions()
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=state_machine_arn, statusFilter="RUNNING"
        ):
            for execution in page["executions"]:
                with contextlib.suppress(sfn.exceptions.ClientError):  # it ended meanwhile
                    sfn.stop_execution(executionArn=execution["executionArn"], cause="offline runtime stopped")

    def stop(self) -> None:
        self.server.gateway.move_tasks.stop()
        self._post("/moto-api/config", self._saved_config)
        self.server.stop()


def _check_free(port: int) -> None:
    """Raise `PortInUseError` when the server could not bind `port`. The probe binds as the server does
    (`SO_REUSEADDR`): the closed connections a stopped service leaves in TIME_WAIT do not block a restart."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise PortInUseError(f"port {port} on 127.0.0.1 is in use: {exc.strerror}") from None


def function_environment(resources: Resources, emulator: Emulator) -> dict[str, str]:
    """What a function's configuration would hold: every setting as its upper-case variable, the
    endpoint override and fake credentials, and Powertools kept quiet (the terminal shows progress)."""
    values = {
        name.upper(): str(value)
        for name, value in resources.settings.model_dump(exclude_none=True, exclude_unset=True).items()
    }
    return {
        **values,
        **FAKE_CREDENTIALS,
        "AWS_ENDPOINT_URL": emulator.endpoint,
        "MOTO_PORT": str(emulator.port),
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }


@contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """Set environment variables for the duration, then put back what was there."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True)
class QueuedMessage:
    message_id: str
    body: str
    attributes: dict[str, str]


def _queued(message: Any) -> QueuedMessage:
    """moto's message as the emulator shows it: its message attributes by their string values."""
    attributes = {key: str(value.get("StringValue", "")) for key, value in message.message_attributes.items()}
    return QueuedMessage(message.id, message.body, attributes)


def queue_messages(name: str) -> list[QueuedMessage]:
    """Every message a queue holds, in flight or not: the emulator's own view (no SQS API lists
    in-flight messages), read in-process from moto's backend, so it changes nothing on the queue."""
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[ACCOUNT][REGION].queues.get(name)
    if queue is None:
        return []
    return [_queued(message) for message in list(queue._messages)]


def watch_arrivals(name: str, arrived: Callable[[QueuedMessage], None]) -> None:
    """Call `arrived` with each message the queue `name` takes in from now on, however it came: sent, or
    moved there by a redrive policy (moto adds both with the queue's `add_message`; a FIFO duplicate it
    drops there is not taken in). The emulator's own view, as `queue_messages`: a message that leaves the
    queue later (received and deleted, moved by a redrive) was still seen to arrive."""
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[ACCOUNT][REGION].queues[name]
    add = queue.add_message

    def add_message(message: Any) -> None:
        add(message)
        if any(held is message for held in list(queue._messages)):
            arrived(_queued(message))

    queue.add_message = add_message  # type: ignore[method-assign]
