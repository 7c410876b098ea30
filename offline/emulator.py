"""The AWS of the offline runtime: moto's threaded server on 127.0.0.1, state-machine execution on.

The functions reach it through ordinary boto3 clients: `environment()` points `AWS_ENDPOINT_URL` at
the server (and `MOTO_PORT`, which moto's Step Functions engine reads to call SQS and DynamoDB from
inside the workflow). Resources are created from the same `Settings` and the same workflow builder as
the stack; the Spark step is bound to a token queue that the local Spark worker serves.

Every request the server answers is counted by operation, so a report can say what a run cost in API
calls. The runtime's own observation clients identify themselves (`OBSERVER_APP_ID` in the user
agent) and are left out of the count.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from moto.core.config import default_user_config
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from functions.jobs import JobCatalog
from functions.lease import table_definition
from functions.settings import FIFO_SUFFIX, Settings
from offline.fifo import FIFO_ATTRIBUTES, keep_group_order

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.literals import QueueAttributeNameType
    from mypy_boto3_stepfunctions import SFNClient

ACCOUNT = "123456789012"  # moto's default account
REGION = "us-east-1"
QUEUE = "jobs"
DLQ = "jobs-dlq"
TOKEN_QUEUE = "spark-tokens"
TABLE = "leases"
STATE_MACHINE = "long-jobs"
OBSERVER_APP_ID = "offline-observer"
DEFAULT_QUEUE_VT_S = 30
SPARK_TASK_TIMEOUT_S = 6 * 3_600
"""The Spark step's whole-job limit offline, as the stack's default Glue run timeout."""
"""The jobs queue's VT when no `visibility_timeout_s` is set (SQS's own default)."""

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
    """moto's threaded server with the request counter in front of its application."""

    def __init__(self, ip_address: str, port: int) -> None:
        super().__init__(ip_address=ip_address, port=port, verbose=False)
        self.counter = ApiCounter(DomainDispatcherApplication(create_backend_app))

    def _server_entry(self) -> None:
        # ThreadedMotoServer's own entry, with `self.counter` as the application.
        self._server = make_server(self._ip_address, self._port, self.counter, True, request_handler=MotoRequestHandler)
        self._server_ready_event.set()
        self._server.serve_forever()


@dataclass(frozen=True)
class Resources:
    """What the emulator created, and the settings the functions run with."""

    endpoint: str
    port: int
    queue_url: str
    queue_arn: str
    queue_visibility_timeout_s: int
    dlq_url: str
    token_queue_url: str
    table_name: str
    state_machine_arn: str
    settings: Settings
    queue_name: str = QUEUE
    dlq_name: str = DLQ


class Emulator:
    """A started moto server and clients on it; `create()` makes the processor's resources."""

    def __init__(self) -> None:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
        self.server = CountingMotoServer("127.0.0.1", 0)  # port 0: the OS picks a free one
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
        """Queue + DLQ with redrive, token queue, lease table (with a stream for the observer), state
        machine (a branch per job type of `catalog`); returns them with `settings` completed by their names."""
        sqs = self.sqs()
        # FIFO (`settings.fifo`): both queues FIFO, named `.fifo`, as the stack makes them (offline.fifo).
        queue_name, dlq_name = QUEUE, DLQ
        fifo_attributes: dict[QueueAttributeNameType, str] = {}
        if settings.fifo:
            keep_group_order()
            queue_name, dlq_name, fifo_attributes = QUEUE + FIFO_SUFFIX, DLQ + FIFO_SUFFIX, FIFO_ATTRIBUTES
        dlq_url = sqs.create_queue(QueueName=dlq_name, Attributes=fifo_attributes)["QueueUrl"]
        dlq_arn = f"arn:aws:sqs:{REGION}:{ACCOUNT}:{dlq_name}"
        queue_vt = settings.visibility_timeout_s if settings.visibility_timeout_s is not None else DEFAULT_QUEUE_VT_S
        queue_url = sqs.create_queue(
            QueueName=queue_name,
            Attributes={
                **fifo_attributes,
                "VisibilityTimeout": str(queue_vt),
                "RedrivePolicy": json.dumps(
                    {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": settings.max_receive_count}
                ),
            },
        )["QueueUrl"]
        token_queue_url = sqs.create_queue(QueueName=TOKEN_QUEUE)["QueueUrl"]
        self.dynamodb().create_table(
            **table_definition(TABLE),
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"},
        )
        state_machine_arn = self.stepfunctions().create_state_machine(
            name=STATE_MACHINE,
            definition=workflow_definition(spark_heartbeat_s, catalog.to_json() if catalog else None),
            roleArn=f"arn:aws:iam::{ACCOUNT}:role/{STATE_MACHINE}",
        )["stateMachineArn"]
        completed = Settings.load(
            {
                **settings.model_dump(exclude_unset=True),
                "table_name": TABLE,
                "queue_url": queue_url,
                "dlq_url": dlq_url,
                "state_machine_arn": state_machine_arn,
            }
        )
        return Resources(
            endpoint=self.endpoint,
            port=self.port,
            queue_url=queue_url,
            queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:{queue_name}",
            queue_visibility_timeout_s=queue_vt,
            dlq_url=dlq_url,
            token_queue_url=token_queue_url,
            table_name=TABLE,
            state_machine_arn=state_machine_arn,
            settings=completed,
            queue_name=queue_name,
            dlq_name=dlq_name,
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
        self._post("/moto-api/config", self._saved_config)
        self.server.stop()


@cache
def workflow_definition(spark_heartbeat_s: int, catalog_json: str | None = None) -> str:
    """The stack's workflow, rendered with the pyspark steps on the token queue and a branch per job type
    of the catalog (the built-ins when None; the CDK loads in seconds, so each rendering is kept)."""
    import aws_cdk as cdk

    from functions.jobs import BUILTIN_TYPES, load_catalog
    from infra.workflow import render_definition, token_queue_pyspark_step

    job_types = list(load_catalog(json.loads(catalog_json))) if catalog_json else list(BUILTIN_TYPES)
    return render_definition(
        table_name=TABLE,
        queue_arns=[f"arn:aws:sqs:{REGION}:{ACCOUNT}:{QUEUE}"],
        job_types=job_types,
        pyspark_step=token_queue_pyspark_step(
            queue_arn=f"arn:aws:sqs:{REGION}:{ACCOUNT}:{TOKEN_QUEUE}",
            queue_url=f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/{TOKEN_QUEUE}",
            heartbeat=cdk.Duration.seconds(spark_heartbeat_s),
            timeout=cdk.Duration.seconds(SPARK_TASK_TIMEOUT_S),
        ),
        region=REGION,
        account=ACCOUNT,
    )


def function_environment(resources: Resources) -> dict[str, str]:
    """What a function's configuration would hold: every setting as its upper-case variable, the
    endpoint override and fake credentials, and Powertools kept quiet (the terminal shows progress)."""
    values = {
        name.upper(): str(value)
        for name, value in resources.settings.model_dump(exclude_none=True, exclude_unset=True).items()
    }
    return {
        **values,
        **FAKE_CREDENTIALS,
        "AWS_ENDPOINT_URL": resources.endpoint,
        "MOTO_PORT": str(resources.port),
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


def queue_messages(name: str) -> list[QueuedMessage]:
    """Every message a queue holds, in flight or not: the emulator's own view (no SQS API lists
    in-flight messages), read in-process from moto's backend, so it changes nothing on the queue."""
    from moto.sqs.models import sqs_backends

    queue = sqs_backends[ACCOUNT][REGION].queues.get(name)
    if queue is None:
        return []
    return [
        QueuedMessage(
            message.id,
            message.body,
            {key: str(value.get("StringValue", "")) for key, value in message.message_attributes.items()},
        )
        for message in list(queue._messages)
    ]
