"""`python -m offline serve` as a user runs it: a separate process on a free port, reached by the AWS CLI,
by plain boto3 and by `longjobs`, stopped by SIGTERM with nothing left ACTIVE."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from longjobs.engine.jobs import load_catalog
from longjobs.engine.settings import Settings
from longjobs.history.checker import main as checker_main
from longjobs.offline.serve import ServeError, _on_signals, check_java, serve, wait_for_stop
from tests.longjobs_support import succeeded
from tests.polling import eventually
from tests.shown_output import shown_outputs, skeleton
from tests.unit.test_docs_examples import blocks, command_lines

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Service:
    process: subprocess.Popen[str]
    endpoint: str
    queue_url: str
    lines: list[str]

    def env(self) -> dict[str, str]:
        return {**os.environ, **CREDENTIALS, "PYTHONPATH": str(ROOT)}

    def longjobs(self, *args: str) -> Any:
        done = subprocess.run(
            [sys.executable, "-m", "longjobs", "--endpoint-url", self.endpoint, *args, "--json"],
            capture_output=True,
            text=True,
            env=self.env(),
            check=False,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def sqs(self) -> Any:
        """A boto3 SQS client of the service, with the banner's credentials."""
        return boto3.client(
            "sqs",
            endpoint_url=self.endpoint,
            region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
            aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def dlq_url(self) -> str:
        """The DLQ's URL, as the banner prints it."""
        [url] = [line.split()[-1] for line in self.lines if line.strip().startswith("dead-letter")]
        return url

    def wait_for(self, what: str, check: Any, timeout_s: float = 45) -> Any:
        return eventually(check, what, timeout_s)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "offline", "serve", "--port", str(port), "--drain-s", "2", "--work-dir", str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,  # no jobs.json there: the built-in job types
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:  # the banner ends with the log file's line
        lines.append(line.rstrip())
        if line.startswith("logs:"):
            break
    fields = dict(line.strip().split(None, 1) for line in lines if line.startswith("  ") and "  " in line.strip())
    endpoint = lines[0].rsplit(" ", 1)[1]
    try:
        yield Service(process, endpoint, fields["queue"], lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_serve_runs_jobs_sent_by_the_aws_cli_and_boto3_and_stops_cleanly(service: Service, tmp_path: Path) -> None:
    assert service.endpoint == f"http://127.0.0.1:{service.endpoint.rsplit(':', 1)[1]}"
    # The banner's own commands, on a machine with no AWS configuration (no AWS_* variables, no ~/.aws).
    printed = dict(line.split(":  ", 1) for line in service.lines if line.startswith(("first:", "send a job:")))
    no_aws = {key: value for key, value in os.environ.items() if not key.startswith("AWS_")}
    home = tmp_path / "home"
    home.mkdir()
    by_banner = subprocess.run(
        ["bash", "-c", f"{printed['first'].strip()} && {printed['send a job'].strip()}"],
        env={**no_aws, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert by_banner.returncode == 0 and "MessageId" in by_banner.stdout, by_banner.stderr
    body = json.dumps({"job_id": "from-cli", "type": "wait", "params": {"seconds": 9}})
    sent = subprocess.run(
        [
            "aws",
            "--endpoint-url",
            service.endpoint,
            "sqs",
            "send-message",
            "--queue-url",
            service.queue_url,
            "--message-body",
            body,
        ],
        capture_output=True,
        text=True,
        env=service.env(),
        check=True,
        timeout=60,
    )
    from_cli = json.loads(sent.stdout)["MessageId"]
    sqs = service.sqs()
    job = json.dumps({"job_id": "from-boto3", "type": "wait", "params": {"seconds": 1}})
    from_boto3 = sqs.send_message(QueueUrl=service.queue_url, MessageBody=job)["MessageId"]
    # A poison nested deeper than Python's reader goes: the receiver dead-letters it as NotJson; serve's own
    # observer and the CLI's redrive filter read it too, and neither may fail on it.
    deep = "[" * 20_000 + "]" * 20_000
    poison = sqs.send_message(QueueUrl=service.queue_url, MessageBody=deep)["MessageId"]

    for message_id in (from_cli, from_boto3):
        lease = service.wait_for(
            f"{message_id} done",
            lambda m=message_id: succeeded(service.longjobs("lease", m)),
        )
        assert lease["lease"]["result"]["waited_s"] in (9, 1)
    story = service.longjobs("lease", from_cli)
    assert story["lease"]["renewal_count"] >= 1, "a 9 s job outlives its first 7 s chunk: it was renewed"
    assert [e["status"] for e in story["executions"]] == ["SUCCEEDED"]
    attributes = sqs.get_queue_attributes(QueueUrl=service.queue_url, AttributeNames=["All"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == attributes["ApproximateNumberOfMessagesNotVisible"] == "0"

    [dead] = service.wait_for("the poison in the DLQ", lambda: service.longjobs("dlq", "list"))
    assert (dead["original_message_id"], dead["error_type"]) == (poison, "NotJson")
    assert "nested deeper" in dead["error_message"], dead["error_message"]
    by_type = service.longjobs("dlq", "redrive", "--type", "wait", "--dry-run")
    assert (by_type["messages"], by_type["skipped"]) == ([], 1), "a body of no job type is not a wait job's"
    moved = service.longjobs("dlq", "redrive", "--include-poison", "--yes")
    assert moved["method"] == "move-task" and moved["task_handle"], "serve has SQS's message move task"
    # The receiver takes it again and sends it straight back, with its error: a new message's copy.
    again = service.wait_for(
        "the redriven poison back in the DLQ",
        lambda: [m for m in service.longjobs("dlq", "list") if m["original_message_id"] != poison],
    )
    assert again[0]["error_type"] == "NotJson"

    # A job that still runs when the service stops: its 2 s of drain pass, it is stopped and released.
    long_job = json.dumps({"job_id": "still-running", "type": "wait", "params": {"seconds": 120}})
    running = sqs.send_message(QueueUrl=service.queue_url, MessageBody=long_job)["MessageId"]
    service.wait_for("the long job running", lambda: service.longjobs("lease", running)["lease"]["status"] == "ACTIVE")
    service.process.send_signal(signal.SIGTERM)
    out, _ = service.process.communicate(timeout=180)  # generous: a loaded machine stops Spark and moto slowly
    assert service.process.returncode == 0, out
    *_, judged, last = out.strip().splitlines()
    assert last.startswith("stopped:") and f"1 stopped and released ({running})" in last, last
    assert last.endswith("0 lease(s) left ACTIVE"), last
    # What the service saw, in the simulation's trace format, judged by the independent checker: the jobs
    # ran once each, the poison and its redriven copy are one message in the DLQ, the stopped job is left.
    trace = tmp_path / "trace.jsonl"
    assert judged == f"history: {trace} (5 message(s)): the independent checker found nothing", judged
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    sent = {record["job_id"] for record in records if record["event"] == "sent"}
    assert {"from-cli", "from-boto3", "still-running", poison} <= sent
    assert records[-1]["event"] == "end" and records[-1]["left"] == {"still-running": 1} and records[-1]["stopped"]
    assert checker_main([str(trace), "--limit", "wait=1000"]) == 0


def test_serve_stop_check_follows_a_poison_redriven_by_copy_and_deleted_from_the_dlq(
    service: Service, tmp_path: Path
) -> None:
    """`dlq redrive` with a filter copies (a move task cannot filter). The copy keeps `OriginalMessageId`, as
    SQS's move task does, so the stop check follows it as the poison it came from: one message. The receiver
    dead-letters the copy again, and the operator then deletes that DLQ copy. The message was dead-lettered
    all the same, with its reason, though no queue holds it now: the stop check says so, and finds nothing
    lost."""
    sqs = service.sqs()
    dlq_url = service.dlq_url()
    # A poison nested deeper than Python's reader goes: the receiver dead-letters it as NotJson; serve's own
    # observer and the CLI's redrive filter read it too, and neither may fail on it.
    deep = "[" * 20_000 + "]" * 20_000
    poison = sqs.send_message(QueueUrl=service.queue_url, MessageBody=deep)["MessageId"]
    [dead] = service.wait_for("the poison in the DLQ", lambda: service.longjobs("dlq", "list"))
    assert (dead["original_message_id"], dead["error_type"]) == (poison, "NotJson")
    assert "nested deeper" in dead["error_message"], dead["error_message"]
    by_type = service.longjobs("dlq", "redrive", "--type", "wait", "--dry-run")
    assert (by_type["messages"], by_type["skipped"]) == ([], 1), "a body of no job type is not a wait job's"

    moved = service.longjobs("dlq", "redrive", "--include-poison", "--error-type", "NotJson", "--yes")
    assert (moved["method"], moved["moved"]) == ("copy", 1), moved
    [again] = service.wait_for(
        "the copied poison back in the DLQ",
        lambda: [m for m in service.longjobs("dlq", "list") if m["original_message_id"] != poison],
    )
    assert again["error_type"] == "NotJson" and again["message_id"] != dead["message_id"]
    [copy] = sqs.receive_message(QueueUrl=dlq_url, MaxNumberOfMessages=1)["Messages"]
    sqs.delete_message(QueueUrl=dlq_url, ReceiptHandle=copy["ReceiptHandle"])

    service.process.send_signal(signal.SIGTERM)
    out, _ = service.process.communicate(timeout=180)
    trace = tmp_path / "trace.jsonl"
    *_, judged, _ = out.strip().splitlines()
    assert judged == f"history: {trace} (1 message(s)): the independent checker found nothing", judged
    assert service.process.returncode == 0, out
    records = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    dead_lettered = {r["job_id"]: r["reason"] for r in records if r["event"] == "dead_lettered"}
    assert dead_lettered.keys() == {poison}, dead_lettered
    reason = dead_lettered[poison]
    assert (reason["OriginalMessageId"], reason["ErrorType"]) == (again["original_message_id"], "NotJson")


def test_serve_refuses_a_port_in_use_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        code = serve(port=port, jobs_file=None, settings_file=None, work_dir=tmp_path, drain_s=0)
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"serve: port {port} on 127.0.0.1 is in use") and "pass --port" in line
    page = " ".join((ROOT / "docs" / "offline.md").read_text(encoding="utf-8").split())
    said = "A port in use, a missing `java` or a missing `node` is one line naming the cause and the fix"
    assert f"{said}, exit code {code}." in page


def test_serve_refuses_a_work_dir_another_serve_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two services on one folder would write into each other's log, job catalog and Spark work: the
    second is refused in one line, and the folder is free again once the first lets go."""
    from longjobs.offline.serve import hold_work_dir

    with hold_work_dir(tmp_path):  # the first service's hold
        code = serve(port=free_port(), jobs_file=None, settings_file=None, work_dir=tmp_path, drain_s=0)
    assert code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == f"serve: another serve uses {tmp_path}: stop it, or give this one its own --work-dir"
    hold_work_dir(tmp_path).close()  # released: a later service takes it


def test_serve_names_java_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("JAVA_HOME", raising=False)  # Spark would run $JAVA_HOME/bin/java: none here
    with pytest.raises(ServeError, match=r"^java not found: PySpark job types run on a local Spark.*Java 17"):
        check_java(load_catalog())


def test_serve_without_pyspark_needs_no_java_and_names_the_types_it_cannot_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the `offline` extra alone (install.md: `pipeline` is for PySpark types), the service runs the
    other types: Java is not asked for, and the banner says which types cannot run and what they need."""
    from types import SimpleNamespace

    from longjobs.offline import serve as serve_module

    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(serve_module, "has_pyspark", lambda: False)
    check_java(load_catalog())  # no ServeError
    resources = SimpleNamespace(
        queue_url="q", dlq_url="d", waiting_queue_urls={}, table_name="t", state_machine_arn="s", settings=Settings()
    )
    processor = SimpleNamespace(resources=resources, endpoint="http://127.0.0.1:4566")
    text = serve_module.banner(processor, load_catalog(), drain_s=5)  # type: ignore[arg-type]
    assert "  not runnable    spark: PySpark is not installed (the `pipeline` extra, and Java 17)" in text.splitlines()


AWS_CLI = str(Path(sys.executable).with_name("aws"))
"""The AWS CLI installed beside this Python (awscli v1, in the venv)."""


def test_serve_redrives_the_dlq_with_the_aws_cli_message_move_task_and_answers_the_documented_commands(
    service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`aws sqs start-message-move-task`, `list-message-move-tasks` and `cancel-message-move-task` against
    `serve` with only dummy credentials and a region in the environment, as AWS answers them
    (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_StartMessageMoveTask.html):
    a message the receiver sent to the DLQ needs a destination (without one the task fails with
    `CouldNotDetermineMessageSource`, https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/troubleshooting-dlq-redrive.html);
    one SQS dead-lettered goes back to its queue by default. An operation serve lacks answers a JSON error."""
    env = {key: value for key, value in service.env().items() if not key.startswith("AWS_")}
    env.update({**CREDENTIALS, "HOME": str(tmp_path)})  # no ~/.aws, no other AWS configuration

    def aws(*args: str) -> Any:
        done = subprocess.run(
            [AWS_CLI, "--endpoint-url", service.endpoint, "--output", "json", *args],
            capture_output=True, text=True, env=env, check=False, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout) if done.stdout.strip() else {}

    sqs = service.sqs()
    dlq_url = service.dlq_url()
    dlq_arn, queue_arn = (
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        for url in (dlq_url, service.queue_url)
    )
    # A poison nested deeper than Python's reader goes: the receiver dead-letters it as NotJson; serve's own
    # observer and the CLI's redrive filter read it too, and neither may fail on it.
    deep = "[" * 20_000 + "]" * 20_000
    poison = sqs.send_message(QueueUrl=service.queue_url, MessageBody=deep)["MessageId"]
    service.wait_for("the poison in the DLQ", lambda: service.longjobs("dlq", "list"))

    aws("sqs", "start-message-move-task", "--source-arn", dlq_arn)
    [failed] = service.wait_for(
        "the task to end", lambda: _ended(aws("sqs", "list-message-move-tasks", "--source-arn", dlq_arn))
    )
    assert (failed["Status"], failed["FailureReason"]) == ("FAILED", "CouldNotDetermineMessageSource")

    handle = aws("sqs", "start-message-move-task", "--source-arn", dlq_arn, "--destination-arn", queue_arn)[
        "TaskHandle"
    ]
    [done] = service.wait_for(
        "the task to end", lambda: _ended(aws("sqs", "list-message-move-tasks", "--source-arn", dlq_arn))
    )
    assert (done["Status"], done["ApproximateNumberOfMessagesMoved"], done["DestinationArn"]) == (
        "COMPLETED",
        1,
        queue_arn,
    )
    assert "TaskHandle" not in done and handle
    # Back on the jobs queue as a new message: the receiver takes it and dead-letters it again under its new id.
    [again] = service.wait_for(
        "the moved poison back through the jobs queue",
        lambda: [m for m in service.longjobs("dlq", "list") if m["original_message_id"] != poison],
        timeout_s=60,
    )
    assert again["error_type"] == "NotJson"

    # A queue of the user's with its own DLQ: what SQS dead-letters goes back by default; a slow task cancels.
    own_dlq = sqs.create_queue(QueueName="own-dlq")["QueueUrl"]
    own_dlq_arn = sqs.get_queue_attributes(QueueUrl=own_dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": own_dlq_arn, "maxReceiveCount": 1})
    own = sqs.create_queue(QueueName="own", Attributes={"RedrivePolicy": redrive})["QueueUrl"]
    for n in range(20):
        sqs.send_message(QueueUrl=own, MessageBody=f"own-{n}")
    while sqs.receive_message(QueueUrl=own, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages"):
        pass  # each message's second receive moves it to own-dlq (maxReceiveCount 1)
    assert (
        sqs.get_queue_attributes(QueueUrl=own_dlq, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"][
            "ApproximateNumberOfMessages"
        ]
        == "20"
    )

    slow = aws(
        "sqs", "start-message-move-task", "--source-arn", own_dlq_arn, "--max-number-of-messages-per-second", "1"
    )
    cancelled = aws("sqs", "cancel-message-move-task", "--task-handle", slow["TaskHandle"])
    [ended] = service.wait_for(
        "the cancel", lambda: _ended(aws("sqs", "list-message-move-tasks", "--source-arn", own_dlq_arn))
    )
    assert ended["Status"] == "CANCELLED" and ended["ApproximateNumberOfMessagesMoved"] < 20
    assert cancelled["ApproximateNumberOfMessagesMoved"] <= ended["ApproximateNumberOfMessagesMoved"]

    aws("sqs", "start-message-move-task", "--source-arn", own_dlq_arn)
    [whole] = service.wait_for(
        "the redrive", lambda: _ended(aws("sqs", "list-message-move-tasks", "--source-arn", own_dlq_arn))
    )
    assert (whole["Status"], "DestinationArn" in whole) == ("COMPLETED", False)
    back = sqs.get_queue_attributes(QueueUrl=own, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert back["ApproximateNumberOfMessages"] == "20", "every message back on its source queue"

    lacking = subprocess.run(
        [AWS_CLI, "--endpoint-url", service.endpoint, "stepfunctions", "redrive-execution", "--execution-arn",
         "arn:aws:states:us-east-1:123456789012:execution:none:none"],
        capture_output=True, text=True, env=env, check=False, timeout=120,
    )  # fmt: skip
    assert lacking.returncode != 0
    assert "(UnsupportedOperation)" in lacking.stderr and "RedriveExecution" in lacking.stderr, lacking.stderr

    run_every_documented_aws_command(service, env)
    answer_every_documented_longjobs_command(service, monkeypatch, capsys)


DOCUMENTED_ENDPOINT = "--endpoint-url http://127.0.0.1:4566"
DOCUMENTED_AWS_REFUSALS = {
    # a documented `aws` command that may end with an error here, and what the error then says
    "sqs cancel-message-move-task": "Only a task in status RUNNING can be cancelled",  # the page says so; a
    # task of the few messages this test's DLQ holds may have ended already
}


def documented_commands(prefix: str) -> list[str]:
    """The commands of README.md's and docs/'s shell blocks that start with `prefix`, as the pages give them."""

    return [
        command
        for block in blocks()
        if block.info in ("sh", "console")
        for command in command_lines(block)
        if command.startswith(prefix)
    ]


def run_every_documented_aws_command(service: Service, env: dict[str, str]) -> None:
    """Every `aws --endpoint-url http://127.0.0.1:4566 ...` command of the pages, run as written by the AWS
    CLI (the port swapped in; `$QUEUE` the queue the banner printed, `$TASK_HANDLE` the handle the page's
    start answered): each works, or ends with the refusal the page explains."""
    documented = "http://127.0.0.1:4566"
    commands = documented_commands(f"aws --endpoint-url {documented} ")
    assert {shlex.split(command)[4] for command in commands} >= {
        "send-message",
        "start-message-move-task",
        "list-message-move-tasks",
        "cancel-message-move-task",
    }, commands
    variables = {"QUEUE": service.queue_url}
    for command in commands:
        words = [AWS_CLI, "--output", "json"] + [
            word.replace(documented, service.endpoint) for word in shlex.split(command)[1:]
        ]
        words = [variables.get(word[1:], word) if word.startswith("$") else word for word in words]
        done = subprocess.run(words, capture_output=True, text=True, env=env, check=False, timeout=120)
        refusal = next(
            (said for start, said in DOCUMENTED_AWS_REFUSALS.items() if " ".join(words[5:]).startswith(start)), None
        )
        assert done.returncode == 0 or (refusal is not None and refusal in done.stderr), f"{command!r}: {done.stderr}"
        answer = json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else {}
        if "TaskHandle" in answer:
            variables["TASK_HANDLE"] = answer["TaskHandle"]


STORY_LEASES = ("9d1e7b52-3c4a-4f0e-8b6d-7a2c1e9f4b38",)
"""A message id of the page's story that a command reads: the newest lease of this service stands in for it."""
DOCUMENTED_REFUSALS = {
    # a documented command that ends with an error here: its exit code, and what its error names
    "submit wait --param seconds=-5": (1, "params.seconds"),  # the page shows the refusal of a bad parameter
    # ids of the page's story, unknown to this service
    "cancel 5f2c9a1e-0b7d-4c1e-9a59-2f8d6c3b1a70": (1, "5f2c9a1e-0b7d-4c1e-9a59-2f8d6c3b1a70"),
    "cancel nightly-2026-11-23": (1, "nightly-2026-11-23"),
}
LIVE = ("--watch", "--interval")
"""A live view runs until Ctrl-C: `top --once` is its one frame, run from the same page."""


def answer_every_documented_longjobs_command(
    service: Service, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every `longjobs --endpoint-url http://127.0.0.1:4566 ...` command of README.md and docs/, run as the
    page gives it against `serve` (its port swapped in): it works, or ends with the error the page shows.
    (Part of the redrive test, which has a service running: a service of its own costs a start.)"""
    from longjobs.cli.__main__ import main

    for key, value in CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("COLUMNS", "200")  # wide enough that no heading or note wraps
    commands = documented_commands(f"longjobs {DOCUMENTED_ENDPOINT}")
    assert len(commands) >= 10, commands
    shown = {
        command: output
        for block in blocks()
        if block.info == "console"
        for command, output in shown_outputs(block.body).items()
    }
    [newest, *_] = service.longjobs("leases")
    ran = compared = 0
    for command in commands:
        page_command = command
        for story_id in STORY_LEASES:
            command = command.replace(story_id, newest["message_id"])
        words = shlex.split(command.replace(DOCUMENTED_ENDPOINT, f"--endpoint-url {service.endpoint}"), comments=True)
        if any(flag in words for flag in LIVE):
            continue
        rest = command.removeprefix(f"longjobs {DOCUMENTED_ENDPOINT} ")
        code, named = next(
            (refusal for start, refusal in DOCUMENTED_REFUSALS.items() if rest.startswith(start)), (0, None)
        )
        capsys.readouterr()
        ended = main(words[1:])
        out, err = capsys.readouterr()
        assert ended == code, f"{command!r} ended with {ended}: {err or out}"
        assert named is None or named in err, f"{command!r}: its error does not name {named!r}: {err}"
        ran += 1
        if shown.get(page_command, "").strip():
            assert skeleton(out + err) == skeleton(shown[page_command]), (
                f"{page_command!r} prints what its page does not show"
            )
            compared += 1
    assert ran >= len(commands) - 2, "only the live views are left out"
    assert compared >= 7, "every command whose output a page shows is compared"


def _ended(listed: Any) -> list[dict[str, Any]] | None:
    """The most recent task, once it has ended."""
    results: list[dict[str, Any]] = listed["Results"]
    return results if results and results[0]["Status"] not in ("RUNNING", "CANCELLING") else None


def test_serve_stop_hears_a_sigterm_another_thread_received() -> None:
    """A process-directed signal may be delivered to any thread that does not block it, and Python runs its
    handler in the main thread only when that thread runs bytecode
    (https://docs.python.org/3/library/signal.html#signals-and-threads). The service's threads (moto's
    server, the mapping's pollers, the extender's schedule) are many: a wait with no timeout slept through
    such a SIGTERM, and `serve` never stopped. A second's delay lets the main thread be waiting first."""

    def send() -> None:
        time.sleep(1)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # received by this thread, not the main one

    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    gave_up = threading.Event()
    try:
        stop = _on_signals(threading.Event())
        fallback = threading.Timer(60, lambda: (gave_up.set(), stop.set()))  # without the fix: never woken
        fallback.start()
        sender = threading.Thread(target=send)
        sender.start()
        wait_for_stop(stop)
        fallback.cancel()
        sender.join()
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)
    assert not gave_up.is_set(), "the SIGTERM another thread received never reached the handler"
