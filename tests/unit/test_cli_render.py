"""`longjobs`'s pure parts: rendering, argument errors, error lines, names shared with other packages."""

from __future__ import annotations

import base64
import io
import json
import re
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError, ReadTimeoutError
from rich.console import Console

from longjobs.cli import commands, dlq, render, resources
from longjobs.cli.__main__ import describe, main
from longjobs.cli.clients import FAKE_KEY_ID, LOCAL_REGION, Connection, make_session
from longjobs.cli.errors import CliError, call_error_text, client_error_text
from longjobs.cli.leases import Execution, LeaseStory
from longjobs.cli.status import LastHour, QueueDepth, Status
from longjobs.engine.cancel import CancelReport, Outcome
from longjobs.engine.delivery.dlq import dlq_attributes, exhausted_attributes
from longjobs.engine.lease import LastError, Lease, LeaseStatus
from tests import REPO_ROOT

NOW = 1_800_000_000.0


def _text(renderable: Any) -> str:
    console = Console(width=200, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


@pytest.mark.parametrize(
    ("moment", "text"),
    [
        (NOW + 245, "in 4m"),
        (NOW - 30, "30s ago"),
        (NOW + 0.4, "now"),
        (NOW + 2 * 3_600 + 300, "in 2h5m"),
        (NOW + 3_600, "in 1h"),
        (NOW - 3 * 86_400, "3d ago"),
        (None, "-"),
    ],
)
def test_cli_relative_times_read_like_a_person_says_them(moment: float | None, text: str) -> None:
    assert render.relative(moment, NOW) == text


def test_cli_shorten_flattens_and_cuts_long_errors() -> None:
    assert render.shorten("a\n  b", 10) == "a b"
    assert render.shorten("x" * 100, 10) == "x" * 9 + "…"
    assert render.shorten(None) == "-"


def test_cli_lease_json_gives_times_in_iso_8601_utc() -> None:
    lease = Lease(
        message_id="m",
        queue_url="q",
        receipt_handle="h",
        receive_count=2,
        received_at=NOW,
        visible_until=NOW + 60.5,
        renew_until=NOW + 3_600,
        status=LeaseStatus.RELEASED,
        result={"rows": 3},
    )

    data = render.lease_json(lease)

    assert data["received_at"] == "2027-01-15T08:00:00.000Z"
    assert data["visible_until"] == "2027-01-15T08:01:00.500Z"
    assert data["renew_at"] is None
    assert data["status"] == "RELEASED"
    assert data["result"] == {"rows": 3}
    json.dumps(data)


def _status(**last_hour: int | None) -> Status:
    return Status(
        at=NOW,
        source="cloudwatch",
        queue=QueueDepth(visible=3, in_flight=2, delayed=1),
        dlq=QueueDepth(visible=1, in_flight=0, delayed=0),
        leases={"ACTIVE": 2, "SUCCEEDED": 5},
        oldest_message_age_s=125.0,
        last_hour=LastHour(**{"renewals": 10, "lapses": 0, "leases_lost": None, **last_hour}),
    )


def test_cli_status_json_and_table_show_the_same_data() -> None:
    status = _status()

    data = render.status_json(status)
    text = _text(render.status_view(status, origin="stack LongJobs-dev"))

    assert data["queue"] == {"visible": 3, "in_flight": 2, "delayed": 1, "total": 6}
    assert data["last_hour"] == {"renewals": 10, "lapses": 0, "leases_lost": None}
    assert data["at"] == "2027-01-15T08:00:00.000Z"
    assert "stack LongJobs-dev" in text
    assert "2m" in text  # the oldest message's age
    assert "n/a" in text  # leases lost: not available


def test_cli_status_names_every_lease_status_whole_at_80_columns() -> None:
    status = replace(_status(), leases={name.value: 0 for name in LeaseStatus})
    console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115

    console.print(render.status_view(status, origin="local service at http://127.0.0.1:4566"))
    lines = console.export_text().splitlines()

    assert all(len(line) <= 80 for line in lines)
    for name in LeaseStatus:
        assert any(line.startswith(f"│ {name.value} ") for line in lines), name
    assert "…" not in "\n".join(lines)


def test_cli_leases_listing_cut_by_its_limit_says_so() -> None:
    """As `dlq list --limit` does: a listing the limit cut short does not know how many there are."""
    lease = Lease("m", "q", "h", 1, NOW, NOW + 60, NOW + 3_600, status=LeaseStatus.ACTIVE)
    cut = _text(render.leases_table([lease, replace(lease, message_id="n")], now=NOW, limit=2))
    whole = _text(render.leases_table([lease], now=NOW, limit=2))
    assert "the newest 2 lease(s) (--limit 2; the table may hold more)" in cut
    assert "1 lease(s), newest first" in whole


def test_cli_status_live_view_fits_a_24_line_terminal_with_the_last_hour() -> None:
    """`status --watch` redraws in place, and a live display cuts what its terminal cannot show: in an
    ordinary 80 x 24 terminal the last hour's table came after all ten statuses and was never seen. The live
    view lists the statuses some lease has; the one-off view lists all ten."""
    leases = {name.value: 0 for name in LeaseStatus} | {"ACTIVE": 3, "SUCCEEDED": 12, "RELEASED": 1}
    status = replace(_status(), leases=leases, notes=["leases lost: not available from the lease table"])
    console = Console(width=80, height=24, record=True, file=open("/dev/null", "w"))  # noqa: SIM115

    console.print(render.status_view(status, origin="local service at http://127.0.0.1:4566", live=True))
    lines = console.export_text().splitlines()

    assert len(lines) <= 24, "\n".join(lines)
    assert any("last hour" in line for line in lines) and not any("PARKED" in line for line in lines)
    assert any("ACTIVE 3, SUCCEEDED 12, RELEASED 1" in line for line in lines), "\n".join(lines)
    one_off = _text(render.status_view(status, origin="local service at http://127.0.0.1:4566"))
    assert all(name.value in one_off for name in LeaseStatus) and "left out" not in one_off


def test_cli_status_shows_each_limited_types_backlog_drain_time() -> None:
    status = replace(_status(), drain_s={"spark": 7_200.0, "wordcount": 0.0})

    text = _text(render.status_view(status, origin="stack LongJobs-dev"))

    assert "backlog drain time" in text and "spark" in text and "2h" in text
    assert render.status_json(status)["drain_s"] == {"spark": 7_200.0, "wordcount": 0.0}


def test_cli_redrive_view_says_how_many_moved_and_what_failed() -> None:
    result = dlq.RedriveResult(method="copy", moved=3, failed=1, errors=["m9: not sent: InternalError: x"])

    text = _text(render.redrive_view(result))

    assert "moved 3 message(s)" in text
    assert "1 message(s) whose send failed: left in the dead-letter queue (a send whose answer was lost may" in text
    assert "m9: not sent: InternalError: x" in text


def test_cli_redrive_view_says_when_an_error_stopped_the_run() -> None:
    result = dlq.RedriveResult(method="copy", moved=10, stopped=True)

    text = _text(render.redrive_view(result))

    assert "moved 10 message(s)" in text
    assert "stopped early by the error below: the messages not moved stay in the dead-letter queue" in text


def test_cli_redrive_view_of_a_move_task_names_the_dlq_to_follow_it_by() -> None:
    arn = "arn:aws:sqs:us-east-1:123456789012:jobs-dlq"
    result = dlq.RedriveResult(method="move-task", task_handle="task-1", approximate_messages=3, source_arn=arn)

    text = " ".join(_text(render.redrive_view(result)).split())

    assert f"`aws sqs list-message-move-tasks --source-arn {arn}`" in text, text


def test_cli_redrive_of_a_move_task_prints_its_handle_and_follow_up_whole_at_80_columns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SQS's task handle is some 170 characters (base64 of the task id and the DLQ's ARN), wider than a
    terminal. Folded across lines, a copy of it breaks `aws sqs cancel-message-move-task --task-handle`.
    Against the local service, the follow-up command names its endpoint, so it runs as printed."""
    endpoint = "http://127.0.0.1:4566"
    arn = "arn:aws:sqs:us-east-1:123456789012:jobs-dlq"
    task = {"taskId": "43df99f7-f72e-459c-81dc-78296ebdc45f", "sourceArn": arn}
    handle = base64.b64encode(json.dumps(task).encode()).decode()
    started = dlq.RedriveResult(method="move-task", task_handle=handle, approximate_messages=11, source_arn=arn)
    found = resources.Resources(
        queue_url=f"{endpoint}/123456789012/jobs",
        dlq_url=f"{endpoint}/123456789012/jobs-dlq",
        table_name="leases",
        state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:long-jobs",
        origin=f"local service at {endpoint}",
    )
    monkeypatch.setattr(commands.Context, "resources", property(lambda _: found))
    monkeypatch.setattr(commands.dlq, "redrive", lambda *_, **__: started)
    monkeypatch.setenv("COLUMNS", "80")

    code = main(["--endpoint-url", endpoint, "dlq", "redrive", "--include-poison", "--yes"])
    lines = capsys.readouterr().out.splitlines()

    assert (code, len(lines)) == (0, 1), lines
    assert f"started SQS message move task {handle} (about 11 message(s))" in lines[0], lines
    follow = f"`aws --endpoint-url {endpoint} sqs list-message-move-tasks --source-arn {arn}`"
    assert lines[0].endswith(f"follow it with {follow}"), lines


def test_cli_cancel_view_shows_a_failed_message_with_its_error() -> None:
    done = CancelReport(message_id="m1", outcome=Outcome.CANCELLED, previous_status="WAITING")
    failed = render.CancelFailure(
        message_id="m2", previous_status="ACTIVE", job_type="wait", job_id="j", error="job#j is still held"
    )

    text = _text(render.cancel_view([done, failed]))
    rows = render.cancel_json([done, failed])

    assert "failed: job#j is still held" in text and "cancelled" in text
    assert [(row["outcome"], row["error"]) for row in rows] == [("cancelled", None), ("failed", "job#j is still held")]
    assert list(rows[0]) == list(rows[1]), "the same keys in the same order"


@pytest.mark.parametrize(
    ("was", "words"),
    [
        ("REJECTED", "already sent to the dead-letter queue: nothing to do"),
        ("DEAD_LETTERING", "on its way to the dead-letter queue: nothing to do"),
    ],
)
def test_cli_cancel_view_tells_a_sent_message_from_one_on_its_way(was: str, words: str) -> None:
    """A DEAD_LETTERING record's send may have failed and been given up: its message is still on its queue,
    and the next receive sends it, so the cancel must not say it is in the DLQ already. A REJECTED record's
    copy was sent, but a redrive may have moved it out since: the cancel says it was sent, not where it is."""
    report = CancelReport(message_id="m1", outcome=Outcome.ALREADY_DEAD_LETTERED, previous_status=was)

    text = " ".join(_text(render.cancel_view([report])).split())

    assert words in text, text


def test_cli_dlq_table_cut_by_limit_does_not_call_its_rows_the_whole_queue() -> None:
    """`dlq list --limit N` stops receiving at N messages, so it cannot know how many the DLQ holds. Its
    title says these are the first N, never that the queue holds N."""
    letters = [dlq.dead_letter({"MessageId": f"m{i}", "Body": "{}", "Attributes": {}}) for i in range(2)]

    cut = " ".join(_text(render.dlq_table(letters, limit=2)).split())
    whole = " ".join(_text(render.dlq_table(letters, limit=5)).split())

    assert "the first 2 message(s) of the dead-letter queue (--limit 2; it may hold more)" in cut, cut
    assert "in the dead-letter queue" not in cut, cut
    assert whole.startswith("2 message(s) in the dead-letter queue"), whole


def test_cli_output_to_a_closed_pipe_ends_quietly(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader that stops early (`longjobs leases --json | head`) closes the pipe under the command. It
    ends with exit code 1 and prints no traceback, as every other error does."""

    def reader_gone(ctx: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr("longjobs.cli.commands.run_leases", reader_gone)

    code = main(["--endpoint-url", "http://127.0.0.1:4566", "leases"])

    assert code == 1
    assert "Traceback" not in capsys.readouterr().err


class _ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: what is written waits in its buffer, as Python buffers a pipe's
    output, and the flush that would send it meets the closed pipe."""

    flushes = 0

    def flush(self) -> None:
        self.flushes += 1
        raise BrokenPipeError(32, "Broken pipe")

    def close(self) -> None:  # no last flush when collected
        pass


def test_cli_output_still_buffered_for_a_closed_pipe_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Output shorter than the buffer (`longjobs status --json | true`), or its tail, is written only when
    stdout is flushed, after the command returned. `main` flushes it, so the closed pipe ends the command
    with exit code 1 there, not in the interpreter's flush at exit ("Exception ignored ... BrokenPipeError",
    exit code 120)."""
    stdout = _ClosedPipe()
    monkeypatch.setattr(sys, "stdout", stdout)

    def printed(ctx: Any) -> int:
        render.print_json([])
        return 0

    monkeypatch.setattr("longjobs.cli.commands.run_leases", printed)

    code = main(["--endpoint-url", "http://127.0.0.1:4566", "leases", "--json"])

    assert (code, stdout.getvalue(), stdout.flushes) == (1, "[]\n", 1)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    code = main(list(argv))
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (
            ["status"],
            "give --stack NAME (a deployed stack) or --endpoint-url URL (the local service; or set AWS_ENDPOINT_URL)",
        ),
        (["--stack", "s", "--endpoint-url", "http://x", "status"], "not both"),
        (["--stack", "s", "leases", "--limit", "x"], "argument --limit: expected a positive whole number, not 'x'"),
        (
            ["--stack", "s", "dlq", "list", "--limit", "0"],
            "argument --limit: expected a positive whole number, not '0'",
        ),
        (["--stack", "s", "leases", "--status", "DONE"], "argument --status: invalid choice: 'DONE'"),
        (["--stack", "s", "fly"], "invalid choice: 'fly'"),
        (["--stack", "s", "dlq"], "the following arguments are required: COMMAND"),
        (["--stack", "s", "submit"], "give a job TYPE"),
        (["--stack", "s", "submit", "wait", "--body", "f.json"], "--body sends a whole message"),
        (
            ["--stack", "s", "dlq", "redrive", "--max-per-second", "501"],
            "argument --max-per-second: expected 1..500",
        ),
        (["--stack", "s", "lease", ""], "argument ID: expected an id, not an empty string"),
        (
            ["--stack", "s", "dlq", "redrive", "--error-type", "attemptsexhausted"],
            "'attemptsexhausted' is no ErrorType of the processor's: one of AttemptsExhausted, Cancelled,",
        ),
        (["--stack", "s", "dlq", "redrive", "--error-type", "attemptsexhausted"], "did you mean AttemptsExhausted?"),
        (["--stack", "s", "cancel", " ", "--yes"], "argument ID: expected an id, not an empty string"),
    ],
)
def test_cli_usage_errors_are_one_line_with_exit_code_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv: list[str], fragment: str
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    code, lines = _run(capsys, *argv)

    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("longjobs: ")
    assert fragment in lines[0]


@pytest.mark.parametrize(
    ("argv", "variable", "line"),
    [
        (
            ["--endpoint-url", "127.0.0.1:4566", "status"],
            None,
            "--endpoint-url '127.0.0.1:4566' is not an endpoint URL: it has no http:// or https:// scheme",
        ),
        (
            ["--endpoint-url", "http://127.0.0.1:99999", "status"],
            None,
            "--endpoint-url 'http://127.0.0.1:99999' is not an endpoint URL: its port is not a whole number from 0 to "
            "65535",
        ),
        (
            ["submit", "wait", "--param", "seconds=1"],
            "localhost:4566",
            "AWS_ENDPOINT_URL 'localhost:4566' is not an endpoint URL: it has no http:// or https:// scheme",
        ),
        (
            ["--stack", "s", "status"],
            "http://",
            "AWS_ENDPOINT_URL 'http://' is not an endpoint URL: it has no valid host",
        ),
    ],
    ids=["no-scheme", "port-out-of-range", "variable-no-scheme", "variable-with-stack"],
)
def test_cli_malformed_endpoint_url_is_one_line_with_exit_code_2(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    variable: str | None,
    line: str,
) -> None:
    """An endpoint without its scheme or with a port out of range is named, with a valid one to copy, before any
    client is made: botocore would raise a bare ValueError from deep inside, at the client or at the first call.
    `AWS_ENDPOINT_URL` is checked with `--stack` too, since botocore reads it there as well."""
    if variable is None:
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    else:
        monkeypatch.setenv("AWS_ENDPOINT_URL", variable)

    code, lines = _run(capsys, *argv)

    assert (code, lines) == (2, [f"longjobs: {line}; give one like http://localhost:4566"])


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["cancel", "m-1", "--reasn", "wrong date"],
            "unrecognized arguments: --reasn wrong date (see longjobs cancel --help)",
        ),
        (
            ["dlq", "redrive", "--include-posion"],
            "unrecognized arguments: --include-posion (see longjobs dlq redrive --help)",
        ),
        (["leases", "--limt", "5"], "unrecognized arguments: --limt 5 (see longjobs leases --help)"),
    ],
)
def test_cli_a_mistyped_option_points_at_the_help_of_its_subcommand(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    """A mistyped option is an error that names it (exit 2) and points at the help that lists the right one:
    the subcommand's, not the top-level help, which lists only the subcommands."""
    code, lines = _run(capsys, "--stack", "s", *argv)

    assert (code, lines) == (2, [f"longjobs: {line}"])


def test_cli_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--help"]) == 0
    assert "scan" in capsys.readouterr().out.lower()


def test_cli_version_names_the_installed_release(capsys: pytest.CaptureFixture[str]) -> None:
    """`longjobs --version` answers what pyproject.toml names, as installed, and needs no stack."""
    import tomllib

    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.split() == ["longjobs", declared]


@pytest.mark.parametrize(
    ("error", "endpoint", "text"),
    [
        (NoCredentialsError(), None, "no AWS credentials found"),
        (
            EndpointConnectionError(endpoint_url="http://127.0.0.1:5000/"),
            "http://127.0.0.1:5000",
            "cannot reach the local service at http://127.0.0.1:5000: is it running? "
            "Start it with `longjobs-offline serve`",
        ),
        (
            EndpointConnectionError(endpoint_url="https://sqs.eu-west-9.amazonaws.com/"),
            None,
            "cannot reach https://sqs.eu-west-9.amazonaws.com/: check the network and the region",
        ),
        (
            ClientError({"Error": {"Code": "AccessDenied", "Message": "not\nallowed"}}, "Scan"),
            None,
            "Scan failed: AccessDenied: not allowed",
        ),
        (CliError("no lease for message m"), None, "no lease for message m"),
    ],
)
def test_cli_describe_names_the_cause_in_one_line(error: Exception, endpoint: str | None, text: str) -> None:
    line = describe(error, endpoint)

    assert line.startswith(text)
    assert "\n" not in line


def test_cli_local_names_are_the_offline_runtimes() -> None:
    from longjobs.offline import emulator

    assert (resources.LOCAL_QUEUE, resources.LOCAL_DLQ, resources.LOCAL_TABLE, resources.LOCAL_STATE_MACHINE) == (
        emulator.QUEUE,
        emulator.DLQ,
        emulator.TABLE,
        emulator.STATE_MACHINE,
    )
    assert LOCAL_REGION == emulator.REGION


def test_cli_receiver_attributes_are_the_ones_the_receiver_puts_on_dlq_copies() -> None:
    delivery = SimpleNamespace(source_arn="arn", message_id="m", original_id="m", receive_count=1, body="{}")
    bad = SimpleNamespace(error_type="NotJson", message="x")

    poison = set(dlq_attributes(delivery, bad))  # type: ignore[arg-type]
    exhausted = set(exhausted_attributes(delivery, ()))  # type: ignore[arg-type]
    assert poison | exhausted == dlq.RECEIVER_ATTRIBUTES


def test_cli_local_connection_uses_fake_credentials_when_none_are_configured(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))

    session = make_session(Connection(endpoint_url="http://127.0.0.1:5000"))

    credentials = session.get_credentials()
    assert credentials is not None
    assert credentials.access_key == FAKE_KEY_ID
    assert session.region_name == "us-east-1"


def test_cli_local_connection_keeps_configured_credentials_and_an_explicit_region() -> None:
    session = make_session(Connection(endpoint_url="http://127.0.0.1:5000", region="eu-west-1"))

    credentials = session.get_credentials()
    assert credentials is not None
    assert credentials.access_key == "testing"  # tests/conftest.py's
    assert session.region_name == "eu-west-1"


def test_cli_account_of_reads_aws_and_local_queue_urls() -> None:
    assert resources.account_of("https://sqs.us-east-1.amazonaws.com/123456789012/jobs") == "123456789012"
    assert resources.account_of("http://127.0.0.1:5000/000000000000/jobs") == "000000000000"
    with pytest.raises(CliError):
        resources.account_of("http://127.0.0.1:5000/jobs")


def test_cli_executions_table_shows_how_long_each_took_or_has_run() -> None:
    started = datetime.fromtimestamp(NOW - 300, UTC)
    executions = [
        Execution("m-1", 1, "arn-1", "FAILED", started, datetime.fromtimestamp(NOW - 240, UTC), "Err", "why"),
        Execution("m-2", 2, "arn-2", "RUNNING", started, None, None, None),
    ]

    text = _text(render.executions_table(executions, receives=2, now=NOW))

    assert "1m " in text
    assert "5m so far" in text
    assert "Err: why" in text


def test_cli_executions_table_prices_each_attempt_and_marks_estimates() -> None:
    """A stopped Glue attempt is priced from its time (an estimate, `~`); a success from what its run
    reported."""
    from longjobs.engine.cost import attempt_usage
    from longjobs.engine.jobs import JobType

    rows = JobType(name="rows", runner="pyspark", entry="jobs/x.py:run", glue={"workers": 10, "worker_type": "G.1X"})
    started = datetime.fromtimestamp(NOW - 1_200, UTC)
    stopped = datetime.fromtimestamp(NOW - 600, UTC)
    executions = [
        Execution("m-1", 1, "arn-1", "ABORTED", started, stopped, None, None, usage=attempt_usage(rows, 600)),
        Execution(
            "m-2",
            2,
            "arn-2",
            "SUCCEEDED",
            stopped,
            datetime.fromtimestamp(NOW, UTC),
            None,
            None,
            usage=attempt_usage(rows, 600, {"execution_time_s": 540}),
        ),
        Execution("m-3", 3, "arn-3", "RUNNING", stopped, None, None, None),
    ]

    text = _text(render.executions_table(executions, receives=3, now=NOW))

    assert "~$0.7337" in text, "10 DPU for 10 minutes at $0.44, and the processor's share"
    assert "$0.6603" in text and "~$0.6603" not in text
    assert "n/a" in text, "without the job types, no price"


def test_cli_ids_stay_whole_at_80_columns() -> None:
    """A message id is copied from `leases` or `dlq list` into `longjobs lease`: at 80 columns the other
    columns give way, the id is never cut."""
    message_id = "9d1e7b52-3c4a-4f0e-8b6d-7a2c1e9f4b38"
    lease = Lease(
        message_id=message_id,
        queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        receipt_handle="handle",
        receive_count=3,
        received_at=NOW - 60,
        visible_until=NOW + 240,
        renew_until=NOW + 43_000,
        status=LeaseStatus.RELEASED,
        job_type="backfill-with-a-long-name",
        last_error=LastError("WaitJobFailed", "the wait job was asked to fail, after a long time of waiting for it"),
    )
    letter = dlq.DeadLetter(
        message_id=message_id,
        error_type="AttemptsExhausted",
        error_message="a long message " * 8,
        receive_count=6,
        original_message_id="0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
        sent_at=NOW,
        body="{}",
    )
    for table in (render.leases_table([lease], now=NOW), render.dlq_table([letter])):
        console = Console(width=80, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(table)
        assert message_id in console.export_text()


def test_cli_render_tables_keep_every_id_whole_on_one_line_at_80_columns() -> None:
    """At 80 columns a table whose ids do not fit is drawn as a block per row: each id (the message's and
    the original's) whole on one line, so it can be copied into `longjobs lease`."""
    message_id, original = "9d1e7b52-3c4a-4f0e-8b6d-7a2c1e9f4b38", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    letters = [
        dlq.DeadLetter(
            message_id=message_id,
            error_type="AttemptsExhausted",
            error_message="a long message " * 8,
            receive_count=6,
            original_message_id=original,
            sent_at=NOW,
            body="{}",
        )
    ]
    for width, stacked in ((80, True), (200, False)):
        console = Console(width=width, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
        console.print(render.dlq_table(letters))
        lines = console.export_text().splitlines()
        assert all(len(line) <= width for line in lines)
        assert any(message_id in line for line in lines) and any(original in line for line in lines), lines
        assert any(line.strip().startswith("│ original message id") for line in lines) is stacked


def _closed(status: LeaseStatus, **fields: Any) -> Lease:
    return Lease(
        message_id="m",
        queue_url="q",
        receipt_handle="h",
        receive_count=2,
        received_at=NOW,
        visible_until=NOW,
        renew_until=NOW,
        status=status,
        closed_at=NOW,
        **fields,
    )


def _rows(renderable: Any) -> dict[str, str]:
    """The `field │ value` rows of a view drawn wide enough for each value to stay on one line."""
    return {
        cells[1].strip(): cells[2].strip()
        for line in _text(renderable).splitlines()
        if len(cells := line.split("│")) == 4
    }


def test_cli_cancel_time_is_shown_as_an_iso_8601_utc_time() -> None:
    """The cancel's record keeps its time as epoch seconds in the lease's result: `lease ID` and its
    `--json` show it as every other time, ISO 8601 in UTC."""
    record = {"reason": "wrong date", "previous_status": "ACTIVE", "at": NOW + 0.25, "done": True}
    lease = _closed(LeaseStatus.CANCELLED, job_id="nightly", result={"cancel": {**record, "dead_letter_id": "d"}})

    data = render.lease_json(lease)
    shown = _rows(render.lease_view(LeaseStory(lease), now=NOW))

    assert data["result"]["cancel"]["at"] == "2027-01-15T08:00:00.250Z"
    assert data["result"]["cancel"]["reason"] == "wrong date"
    assert json.loads(shown["result"])["cancel"]["at"] == "2027-01-15T08:00:00.250Z", shown
    assert str(NOW) not in shown["result"]
    assert lease.result is not None and lease.result["cancel"]["at"] == NOW + 0.25, "the lease itself unchanged"
    assert render.lease_json(_closed(LeaseStatus.SUCCEEDED, result={"at": 5}))["result"] == {"at": 5}, "a job's own"
    claimed = _closed(LeaseStatus.CANCELLED, result={"cancel": {**record, "sending_at": NOW, "sending_by": "cancel"}})
    assert render.lease_json(claimed)["result"]["cancel"]["sending_at"] == "2027-01-15T08:00:00.000Z", "its claim"


@pytest.mark.parametrize(
    ("lease", "status", "job_id"),
    [
        pytest.param(
            _closed(
                LeaseStatus.REJECTED,
                job_type="wait",
                job_id="nightly",
                last_error=LastError("AttemptsExhausted", "WaitJobFailed: the wait job was asked to fail"),
            ),
            "REJECTED (AttemptsExhausted)",
            "nightly",
            id="attempts-exhausted",
        ),
        pytest.param(
            _closed(LeaseStatus.REJECTED, last_error=LastError("NotJson: body is not JSON: Expecting value")),
            "REJECTED (NotJson)",
            "-",
            id="poison",
        ),
        pytest.param(_closed(LeaseStatus.RELEASED, last_error=LastError("WaitJobFailed")), "RELEASED", "-", id="other"),
    ],
)
def test_cli_lease_view_says_why_a_rejected_lease_went_to_the_dlq(lease: Lease, status: str, job_id: str) -> None:
    shown = _rows(render.lease_view(LeaseStory(lease), now=NOW))

    assert (shown["status"], shown["job id"]) == (status, job_id), shown


def test_cli_lease_view_names_the_dlq_sender_by_the_end_of_its_receipt_handle() -> None:
    """A real claimant is a receipt handle of hundreds of characters and a draw (`Delivery.claimant`): the
    view shows the draw and the handle's end, enough to tell two receives apart."""
    handle = "AQEB" + "x" * 300 + "tail-of-handle"
    lease = _closed(LeaseStatus.REJECTED, claimed_by=f"{handle}#0000beef", claimed_at=NOW, copy_id="c")
    shown = _rows(render.lease_view(LeaseStory(lease), now=NOW))
    assert shown["sent by"] == "a receive (handle ...il-of-handle, #0000beef)"


@pytest.mark.parametrize(
    ("status", "copy_id", "shown_copy"),
    [
        (LeaseStatus.REJECTED, "dlq-copy-1", "dlq-copy-1"),
        (LeaseStatus.DEAD_LETTERING, None, "- (not noted yet: its send is claimed, or failed and given up)"),
    ],
    ids=["noted", "claimed"],
)
def test_cli_lease_view_names_a_rejected_records_dlq_copy_and_its_sender(
    status: LeaseStatus, copy_id: str | None, shown_copy: str
) -> None:
    """A record the receiver claimed its DLQ send on names the DLQ copy and the receive that sent it, not a
    parked copy (`dlq_claim`), and its status the reason."""
    lease = _closed(
        status,
        last_error=LastError("AttemptsExhausted", "boom"),
        claimed_by="handle-1#0000beef",
        claimed_at=NOW,
        copy_id=copy_id,
    )
    shown = _rows(render.lease_view(LeaseStory(lease), now=NOW))

    assert (shown["DLQ copy"], shown["sent by"]) == (shown_copy, "handle-1#0000beef"), shown
    assert shown["status"] == f"{status.value} (AttemptsExhausted)"
    assert "parked copy" not in shown and "run by copy" not in shown


@pytest.mark.parametrize(
    ("was", "kind"), [(LeaseStatus.REQUEUED, "requeued copy"), (LeaseStatus.PARKED, "parked copy")]
)
def test_cli_lease_view_of_a_cancelled_marker_names_its_copy_by_what_it_was(was: LeaseStatus, kind: str) -> None:
    """A requeued or parked message cancelled keeps its marker, now CANCELLED, naming its copy. The copy's
    claim is refused when it is received, and the receiver dead-letters it (operate.md, `cancel`). So the
    view names the copy as the cancel found it, and says no copy ran: not "no copy received yet", which
    stays false once the copy was received and sent to the DLQ."""
    record = {"reason": "cancelled by an operator", "previous_status": was.value, "at": NOW, "done": True}
    lease = _closed(LeaseStatus.CANCELLED, copy_id="copy-1", result={"cancel": record})

    shown = _rows(render.lease_view(LeaseStory(lease), now=NOW))

    assert (shown.get(kind), shown.get("run by copy")) == ("copy-1", "- (none: cancelled first)"), shown


def test_cli_lease_view_of_a_given_up_dlq_claim_does_not_name_its_claimant_as_the_sender() -> None:
    """A DEAD_LETTERING record without `claimed_at` is a claim whose send failed and was given up
    (`dlq_claim`): that receive sent nothing, and the next receive of the message sends it. The view says so,
    rather than name the receive that failed as the one that sent the message."""
    lease = _closed(
        LeaseStatus.DEAD_LETTERING, last_error=LastError("AttemptsExhausted", "boom"), claimed_by="handle-1#0000beef"
    )

    shown = _rows(render.lease_view(LeaseStory(lease), now=NOW))

    assert "handle-1#0000beef" in shown["sent by"] and "gave it up" in shown["sent by"], shown
    assert "next receive" in shown["sent by"], shown


@pytest.mark.parametrize(
    ("lease", "shown_until"),
    [
        pytest.param(
            replace(_closed(LeaseStatus.ACTIVE), renew_at=NOW + 60, renew_until=NOW + 3_600, closed_at=None),
            "2027-01-15T09:00:00.000Z (in 1h)",
            id="active",
        ),
        pytest.param(
            replace(_closed(LeaseStatus.DEAD_LETTERING), renew_until=NOW + 14 * 86_400),
            "- (not renewed)",
            id="dlq-record-kept-for-its-retention",
        ),
        pytest.param(replace(_closed(LeaseStatus.RELEASED), renew_until=NOW + 3_600), "- (not renewed)", id="released"),
    ],
)
def test_cli_lease_view_shows_renew_until_only_for_a_renewed_lease(lease: Lease, shown_until: str) -> None:
    """A closed record's `renew_until` dates its TTL, not a hold: the view shows it only for a lease the
    extender renews, so a DLQ record kept 14 days does not read as hidden that long."""
    assert _rows(render.lease_view(LeaseStory(lease), now=NOW))["renew until"] == shown_until


@pytest.mark.parametrize(
    ("error", "line"),
    [
        (
            ClientError({"Error": {"Code": "InternalError", "Message": "try\n  again"}}, "SendMessage"),
            "InternalError: try again",
        ),
        (ClientError({"Error": {"Code": "AccessDenied"}}, "SendMessage"), "AccessDenied"),
        (ClientError({}, "SendMessage"), "error"),
        (  # another HTTP server at the endpoint: botocore passes its page on as the message
            ClientError(
                {"Error": {"Code": "501", "Message": "<!DOCTYPE HTML>\n<html><body>...</body></html>"}}, "SendMessage"
            ),
            "501: the answer is a web page, not an AWS service's: is the endpoint URL the local service's?",
        ),
        (ReadTimeoutError(endpoint_url="https://sqs"), 'ReadTimeoutError: Read timeout on endpoint URL: "https://sqs"'),
    ],
)
def test_cli_error_line_of_a_failed_call(error: Exception, line: str) -> None:
    assert call_error_text(error) == line  # type: ignore[arg-type]
    if isinstance(error, ClientError):
        assert client_error_text(error) == f"SendMessage failed: {line}"


def test_cli_lease_view_shows_when_the_workflow_closed_a_lease() -> None:
    """The workflow notes when it closed a lease apart (`workflow_closed_at`), and an older workflow noted
    nothing: the view then shows the end of the execution the lease names, and says so. A lease the
    processor's code closed shows its own `closed_at`."""
    started, stopped = datetime.fromtimestamp(NOW - 900, UTC), datetime.fromtimestamp(NOW - 60, UTC)
    runs = [
        Execution("m-1", 1, "arn-1", "FAILED", started, datetime.fromtimestamp(NOW - 600, UTC), "Err", "why"),
        Execution("m-2", 2, "arn-2", "SUCCEEDED", started, stopped, None, None),
    ]
    by_workflow = replace(_closed(LeaseStatus.SUCCEEDED), closed_at=None, execution_arn="arn-2")

    shown = _rows(render.lease_view(LeaseStory(by_workflow, runs), now=NOW))
    own = _rows(render.lease_view(LeaseStory(replace(by_workflow, closed_at=NOW - 30), runs), now=NOW))
    unknown = _rows(render.lease_view(LeaseStory(replace(by_workflow, execution_arn="arn-3"), runs), now=NOW))
    noted = _rows(render.lease_view(LeaseStory(replace(by_workflow, workflow_closed_at=NOW - 90), runs), now=NOW))

    assert shown["closed at"] == "2027-01-15T07:59:00.000Z (1m ago), its execution's end", shown
    assert own["closed at"].startswith("2027-01-15T07:59:30.000Z"), own
    assert unknown["closed at"] == "-", unknown
    assert noted["closed at"] == "2027-01-15T07:58:30.000Z (1m ago), by its workflow", noted


@pytest.mark.parametrize(
    ("status", "closed_at", "shown"),
    [
        (LeaseStatus.ACTIVE, None, "in 30s"),
        (LeaseStatus.RELEASED, NOW, "in 30s"),  # released by the processor's code, which notes when it shows
        (LeaseStatus.RELEASED, None, "-"),  # by an older workflow: its release delay after the execution's end
        (LeaseStatus.SUCCEEDED, None, "-"),
        (LeaseStatus.REJECTED, NOW, "-"),
        (LeaseStatus.CANCELLED, NOW, "-"),
        (LeaseStatus.PARKED, NOW, "-"),
    ],
)
def test_cli_leases_show_when_a_message_shows_again_only_while_it_is_on_its_queue(
    status: LeaseStatus, closed_at: float | None, shown: str
) -> None:
    """A lease's `visible_until` is when its message shows again while it is on its queue. A message deleted,
    in the DLQ or copied never shows again under that lease; `in 30s` would read as if it will."""
    lease = replace(_closed(status), closed_at=closed_at, visible_until=NOW + 30)

    row = next(line for line in _text(render.leases_table([lease], now=NOW)).splitlines() if line.startswith("│ m "))
    view = _rows(render.lease_view(LeaseStory(lease), now=NOW))

    assert [cell.strip() for cell in row.split("│")][6] == shown, row
    assert view["visible until"].endswith("(in 30s)") if shown != "-" else view["visible until"].startswith("- ")


def test_cli_lease_view_of_a_dead_lettering_record_does_not_say_its_message_left_its_queue() -> None:
    """A DEAD_LETTERING record's message is still on its queue until its receive has sent it (a claim
    given up after a failed send is sent by the next receive): never "not on its queue"."""
    lease = replace(_closed(LeaseStatus.DEAD_LETTERING), closed_at=NOW, visible_until=NOW + 30)

    shown = _rows(render.lease_view(LeaseStory(lease), now=NOW))["visible until"]

    assert "not on its queue" not in shown and "on its way to the DLQ" in shown, shown


def test_cli_lease_view_of_a_released_or_cancelling_lease_says_when_its_message_shows_again() -> None:
    """A message the workflow released is on its queue: it shows the attempt's release delay after the
    release (`workflow_closed_at`), never "not on its queue", which would read as gone for good. One whose
    cancel is not finished is kept hidden until its `visible_until`."""
    released = replace(
        _closed(LeaseStatus.RELEASED), closed_at=None, workflow_closed_at=NOW - 10, visible_until=NOW - 100
    )
    released = replace(released, release_delay_s=45)
    older = replace(released, workflow_closed_at=None)
    cancelling = replace(_closed(LeaseStatus.CANCELLED), renew_at=NOW + 20, visible_until=NOW + 30)

    shown = {
        name: _rows(render.lease_view(LeaseStory(lease), now=NOW))["visible until"]
        for name, lease in (("released", released), ("older", older), ("cancelling", cancelling))
    }
    listed = _text(render.leases_table([released], now=NOW))

    assert shown["released"].endswith("(in 35s), the release delay after the workflow's release"), shown
    assert shown["older"] == "- (45s after its execution's end: the workflow's release)", shown
    assert shown["cancelling"].endswith("(in 30s)"), shown
    assert "in 35s" in listed, listed


BOX_LINE = ("┏", "┃", "┡", "│", "└")


def _page_table_lines(command: str) -> list[str]:
    """The table lines operate.md shows for `longjobs --endpoint-url http://127.0.0.1:4566 <command>`."""
    page = (REPO_ROOT / "docs" / "operate.md").read_text(encoding="utf-8").splitlines()
    start = page.index(f"$ longjobs --endpoint-url http://127.0.0.1:4566 {command}") + 1
    shown: list[str] = []
    for line in page[start:]:
        if line.startswith(("$ ", "```")):
            break
        if line.startswith(BOX_LINE):
            shown.append(line)
    return shown


def _drawn_table_lines(renderable: Any) -> list[str]:
    console = Console(width=120, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines() if line.startswith(BOX_LINE)]


def test_cli_operate_md_tables_are_what_the_command_draws_at_120_columns() -> None:
    """operate.md lays its examples out for a terminal 120 columns wide and says an id is never cut. Its
    tables of `status`, `leases` and `dlq list` are drawn here from the values they show: a hand-edited
    example (an id cut in two, a row wider than its column) differs from what an operator sees."""
    local = "local service at http://127.0.0.1:4566"
    leases = {name.value: 0 for name in LeaseStatus} | {"ACTIVE": 1, "RELEASED": 1}
    status = Status(
        at=NOW,
        source="lease table",
        queue=QueueDepth(visible=1, in_flight=0, delayed=0),
        dlq=QueueDepth(visible=1, in_flight=0, delayed=0),
        leases=leases,
        oldest_message_age_s=None,
        last_hour=LastHour(renewals=3, lapses=None, leases_lost=0),
    )
    released = replace(
        _closed(LeaseStatus.RELEASED, job_type="wait"),
        message_id="9d1e7b52-3c4a-4f0e-8b6d-7a2c1e9f4b38",
        receive_count=1,
        visible_until=NOW + 27,
        last_error=LastError("WaitJobFailed", "the wait job was asked to fail"),
    )
    active = replace(
        _closed(LeaseStatus.ACTIVE, job_type="wait", renewal_count=3),
        message_id="5f2c9a1e-0b7d-4c1e-9a59-2f8d6c3b1a70",
        receive_count=1,
        visible_until=NOW + 245,
        closed_at=None,
    )
    poison = dlq.DeadLetter(
        message_id="e5aa8df5-472f-4cc8-a613-6d64d217d833",
        error_type="NotJson",
        error_message="body is not JSON: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)",
        receive_count=1,
        original_message_id="0c4e2b7a-1d3f-4a5b-9c8e-6f2a1b3c4d5e",
        sent_at=NOW,
        body="{not json",
    )
    examples = {
        "status": render.status_view(status, origin=local),
        "leases": render.leases_table([released, active], now=NOW),
        "dlq list": render.dlq_table([poison]),
    }

    for command, view in examples.items():
        assert _page_table_lines(command) == _drawn_table_lines(view), command


def test_cli_redrive_json_has_exactly_the_fields_operate_md_lists() -> None:
    """operate.md lists the fields of `dlq redrive --json`, for scripts that read them: each field printed is
    listed there, and each listed field is printed."""
    page = (REPO_ROOT / "docs" / "operate.md").read_text(encoding="utf-8")
    section = page[page.index("## `dlq redrive") : page.index("## `cancel")]
    listing = section[section.index("`--json` prints:") :].split("\n\n")[1]
    listed = [re.match(r"- `(\w+)`", line) for line in listing.splitlines() if line.startswith("- ")]

    printed = render.jsonable(dlq.RedriveResult(method="copy"))

    assert sorted(match.group(1) for match in listed if match) == sorted(printed)


def test_cli_errors_of_an_unreachable_or_empty_local_service_read_as_operate_md_shows(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """operate.md's table of errors says each error must read as shown. Those an operator meets first
    (no connection given, nothing listening, no offline runtime's queues there) are produced here."""
    page = (REPO_ROOT / "docs" / "operate.md").read_text(encoding="utf-8")
    table = page[page.index("| 1 | the command") : page.index("| 130 |")]
    cells = [cell.strip().strip("|").strip().strip("`").strip() for cell in re.split(r"\s[·|]\s", table)]
    endpoint = "http://127.0.0.1:4566"
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert main(["status"]) == 2
    nowhere = capsys.readouterr().err.strip().removeprefix("longjobs: ")

    class NoQueues:
        def get_queue_url(self, **_: Any) -> Any:
            raise ClientError({"Error": {"Code": "QueueDoesNotExist", "Message": "no"}}, "GetQueueUrl")

    unreachable = describe(EndpointConnectionError(endpoint_url=endpoint), endpoint)
    with pytest.raises(CliError) as empty:
        resources.local(NoQueues(), endpoint, "us-east-1")  # type: ignore[arg-type]

    assert nowhere in cells, nowhere
    assert unreachable in cells, unreachable
    shown = next(cell for cell in cells if cell.startswith("the local service at URL has no queue"))
    assert empty.value.message.replace(endpoint, "URL").startswith(shown.removesuffix("...").rstrip()), shown
    with pytest.raises(CliError) as elsewhere:
        resources.local(NoQueues(), endpoint, "eu-west-1")  # type: ignore[arg-type]
    shown = next(cell for cell in cells if "has no queue 'jobs' or 'jobs.fifo' in eu-west-1" in cell)
    assert elsewhere.value.message.replace(endpoint, "URL").startswith(shown.split("...")[0].rstrip()), shown
