"""`longjobs dlq redrive` and its filters against the offline runtime: the whole processor on moto's server,
as `serve` runs it, with `max_attempts` 1. The runtime itself fills the DLQ with a mix: two wait jobs that
fail (`AttemptsExhausted`), a body that is not JSON (`NotJson`), a spark job without its parameters
(`InvalidParameters`) and a running wait job an operator cancelled (`Cancelled`).

Each redrive runs through the command (`longjobs.cli.__main__.main`, as the other offline-runtime tests
do). Right after it, the selected messages have left the DLQ and every other message is still there, under
the id it had. The runtime keeps running, so each moved message is received again as a new message and
fails as before: it comes back to the DLQ under a new id, with a new original id (the copy's). That shows
it really went back to the jobs queue, and it brings back the mix for the next test."""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

import longjobs.cli.__main__ as cli_main
from longjobs.engine.jobs import load_catalog
from longjobs.engine.settings import Settings
from longjobs.offline.faults import Faults
from longjobs.offline.processor import LocalProcessor
from longjobs.offline.runtime import captured_logs
from longjobs.offline.serve import SERVE_SETTINGS, Calm
from tests.longjobs_support import Result, assert_one_line_error, run
from tests.polling import eventually, past_start_check

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
"""An invocation that adds no metric flushes none (the scenario runner ignores it too)."""

NOT_JSON = "{not json: a redrive test"
SPARK_BAD = json.dumps({"job_id": "spark-bad", "type": "spark", "params": {}})  # no input: InvalidParameters
FAILING = ("wait-a", "wait-b")  # wait jobs that fail at once: AttemptsExhausted after the one attempt
CANCELLED = "wait-cancelled"  # a running wait job, cancelled: Cancelled
MIX = {"wait-a": "AttemptsExhausted", "wait-b": "AttemptsExhausted", "spark-bad": "InvalidParameters"}
MIX |= {"not-json": "NotJson", CANCELLED: "Cancelled"}
"""The DLQ's mix: each message by its label (the job id in its body, or `not-json`), with its ErrorType."""
RETRIED = {"wait-a", "wait-b"}
"""What a redrive moves without a filter: not the poison, not the cancelled job."""


def command(*argv: str) -> Result:
    """The command, outside a test (the fixture): its output captured here."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main.main(list(argv))
    return Result(code, out.getvalue(), err.getvalue())


def label(letter: dict[str, Any]) -> str:
    try:
        return str(json.loads(letter["body"])["job_id"])
    except ValueError:
        return "not-json"


def dlq(endpoint: str) -> dict[str, dict[str, Any]]:
    """The DLQ's messages (`dlq list --json`) by label; each label at most once."""
    listed = command("--endpoint-url", endpoint, "dlq", "list", "--json")
    assert listed.code == 0, listed
    letters = [(label(letter), letter) for letter in listed.json()]
    found = dict(letters)
    assert len(found) == len(letters), f"a label twice in the DLQ: {[name for name, _ in letters]}"
    return found


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessor]:
    settings = Settings.load({**SERVE_SETTINGS, "max_attempts": 1})
    work_dir = tmp_path_factory.mktemp("redrive")
    with (
        captured_logs(work_dir / "runtime.log"),  # the functions' logs, off the command's output
        LocalProcessor(settings, catalog=load_catalog(), work_dir=work_dir, faults=Faults(Calm(settings))) as made,
    ):
        made.faults.begin()
        made.start()
        fill_the_dlq(made)
        yield made


def fill_the_dlq(processor: LocalProcessor) -> None:
    """The runtime dead-letters the mix: each message received and judged by the real receiver."""
    endpoint = processor.endpoint
    for job_id in FAILING:
        sent = command(
            "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=0", "--param", "fail=true",
            "--job-id", job_id,
        )  # fmt: skip
        assert sent.code == 0, sent
    sqs = processor.emulator.sqs()
    for body in (NOT_JSON, SPARK_BAD):  # `submit` refuses these: sent as a producer would
        sqs.send_message(QueueUrl=processor.resources.queue_url, MessageBody=body)
    running = command(
        "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=600", "--job-id", CANCELLED, "--json"
    )
    message_id = running.json()["message_id"]
    lease = eventually(
        lambda: (
            (found := command("--endpoint-url", endpoint, "lease", message_id, "--json")).code == 0
            and found.json()["executions"]
            and found.json()
        ),
        "the job to cancel started",
    )
    past_start_check(processor.emulator.stepfunctions(), lease["executions"][0]["arn"])
    cancelled = command("--endpoint-url", endpoint, "cancel", CANCELLED, "--yes")
    assert cancelled.code == 0, cancelled
    eventually(lambda: dlq(endpoint).keys() == MIX.keys(), "the runtime dead-lettered the whole mix")
    assert {name: letter["error_type"] for name, letter in dlq(endpoint).items()} == MIX


def redrive(capsys: pytest.CaptureFixture[str], endpoint: str, *flags: str) -> Result:
    return run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", *flags, "--yes", "--json")


def assert_moved_exactly(
    capsys: pytest.CaptureFixture[str], processor: LocalProcessor, flags: list[str], moved: set[str]
) -> None:
    """Redrive with `flags`: exactly `moved` leaves the DLQ, the rest stays; then the moved come back."""
    endpoint = processor.endpoint
    before = dlq(endpoint)
    assert before.keys() == MIX.keys(), "the mix is whole before the redrive"

    result = redrive(capsys, endpoint, *flags)

    assert result.code == 0, result
    report = result.json()
    assert report["method"] == "copy", "a filter copies (a move task cannot filter)"
    assert (report["moved"], report["failed"], report["errors"]) == (len(moved), 0, [])
    assert report["skipped"] + report["kept"] == len(MIX) - len(moved), report
    after_ids = {letter["message_id"] for letter in dlq(endpoint).values()}
    assert {name for name in MIX if before[name]["message_id"] not in after_ids} == moved, "exactly these left"
    # The moved ones ran again on the runtime and failed as before: back under new ids.
    back = eventually(
        lambda: (found := dlq(endpoint)).keys() == MIX.keys() and found,
        f"{sorted(moved)} back in the DLQ after running again",
    )
    for name, letter in back.items():
        assert letter["error_type"] == MIX[name]
        if name in moved:
            assert letter["message_id"] != before[name]["message_id"]
            assert letter["original_message_id"] not in (None, before[name]["original_message_id"])
        else:
            assert letter["message_id"] == before[name]["message_id"], f"{name} stayed where it was"


ISO_UTC = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


def test_cli_lease_of_each_dead_lettered_message_tells_its_job_and_why(
    processor: LocalProcessor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`longjobs lease` on each message the runtime dead-lettered, by the id its producer got: a job whose
    attempts ran out keeps its job id and reads `AttemptsExhausted`; a poison body has no job (`-`); a
    cancel's time is an ISO 8601 UTC time, as every other time the command shows."""
    monkeypatch.setenv("COLUMNS", "400")  # each field's value on one line
    endpoint = processor.endpoint
    for name, letter in dlq(endpoint).items():
        original = letter["original_message_id"]
        shown = command("--endpoint-url", endpoint, "lease", original)
        stored = command("--endpoint-url", endpoint, "lease", original, "--json")
        assert shown.code == 0 and stored.code == 0, (shown, stored)
        lease = stored.json()["lease"]
        rows = {
            line.split("│")[1].strip(): line.split("│")[2].strip() for line in shown.out.splitlines() if "│" in line
        }
        if name in FAILING:
            assert (lease["status"], lease["job_id"]) == ("REJECTED", name), lease
            assert lease["last_error"]["error"] == "AttemptsExhausted", lease
            assert (rows["job id"], rows["status"]) == (name, "REJECTED (AttemptsExhausted)"), shown.out
        elif name == CANCELLED:
            at = lease["result"]["cancel"]["at"]
            assert isinstance(at, str) and re.fullmatch(ISO_UTC, at), lease["result"]
            assert rows["result"].startswith(f'{{"cancel": {{"at": "{at}", '), shown.out
            assert rows["job id"] == CANCELLED, shown.out
        else:  # poison: no job to name
            assert (lease["status"], lease["job_id"]) == ("REJECTED", None), lease
            assert rows["job id"] == "-" and rows["status"] == f"REJECTED ({MIX[name]})", shown.out


def test_cli_redrive_without_yes_and_without_a_terminal_refuses_and_moves_nothing(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str]
) -> None:
    endpoint = processor.endpoint
    before = {name: letter["message_id"] for name, letter in dlq(endpoint).items()}

    refused = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--type", "wait")  # stdin: pytest's

    assert_one_line_error(refused, 1, "dlq redrive asks for confirmation", "pass --yes to confirm")
    assert {name: letter["message_id"] for name, letter in dlq(endpoint).items()} == before
    dry = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--dry-run", "--json")
    assert dry.code == 0, "a dry run asks nothing"
    assert (dry.json()["method"], dry.json()["skipped"] + dry.json()["kept"]) == ("dry-run", len(MIX) - len(RETRIED))
    assert {(label(letter), letter["message_id"]) for letter in dry.json()["messages"]} == {
        (name, before[name]) for name in RETRIED
    }, "the same messages, still in the DLQ"


def resolve(flags: list[str], listed: dict[str, dict[str, Any]]) -> list[str]:
    """`LABEL.FIELD` in `flags` as the DLQ message's field (`message_id`, `original_message_id`)."""
    return [listed[flag.split(".")[0]][flag.split(".")[1]] if "_id" in flag and "." in flag else flag for flag in flags]


@pytest.mark.parametrize(
    ("flags", "moved"),
    [
        pytest.param([], RETRIED, id="default-poison-and-cancelled-stay"),
        pytest.param(["--error-type", "NotJson"], {"not-json"}, id="error-type-names-poison"),
        pytest.param(["--type", "spark", "--include-poison"], {"spark-bad"}, id="type-include-poison"),
        pytest.param(  # as `dlq list` shows them: the id `submit` or the producer got, or the DLQ message's own
            [
                "--include-poison",
                "--message-id",
                "not-json.original_message_id",
                "--message-id",
                "spark-bad.message_id",
            ],
            {"not-json", "spark-bad"},
            id="message-id-original-or-own",
        ),
    ],
)
def test_cli_redrive_moves_exactly_what_the_filters_select(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str], flags: list[str], moved: set[str]
) -> None:
    assert_moved_exactly(capsys, processor, resolve(flags, dlq(processor.endpoint)), moved)


@pytest.mark.parametrize(
    ("flags", "selected"),
    [
        pytest.param(
            ["--error-type", "AttemptsExhausted", "--error-type", "InvalidParameters"],
            {"wait-a", "wait-b", "spark-bad"},
            id="error-type-repeated",
        ),
        pytest.param(["--error-type", "Cancelled"], {CANCELLED}, id="error-type-cancelled"),
        pytest.param(["--type", "wait"], RETRIED, id="type-wait-cancelled-stays"),
        pytest.param(["--type", "spark"], set(), id="type-spark-poison-stays"),
        pytest.param(["--type", "wait", "--include-poison"], RETRIED | {CANCELLED}, id="type-wait-include-poison"),
        pytest.param(["--job-id", "wait-b"], {"wait-b"}, id="job-id"),
        pytest.param(["--job-id", "spark-bad"], set(), id="job-id-of-poison"),
        pytest.param(["--job-id", "wait-a", "--type", "spark"], set(), id="all-must-hold"),
        pytest.param(["--job-id", "wait-a", "--error-type", "NotJson"], set(), id="all-must-hold-error-type"),
        pytest.param(
            ["--message-id", "wait-a.original_message_id", "--message-id", "not-json.message_id"],
            {"wait-a"},
            id="message-id-poison-stays",
        ),
        pytest.param(
            ["--message-id", "wait-b.message_id", "--message-id", "not-a-message"], {"wait-b"}, id="message-id"
        ),
        pytest.param(["--since", "30m"], RETRIED, id="since-30m-all-recent"),
        pytest.param(["--since", "30m", "--include-poison"], set(MIX), id="since-30m-include-poison"),
    ],
)
def test_cli_redrive_dry_run_lists_what_the_filters_select(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str], flags: list[str], selected: set[str]
) -> None:
    """More combinations, by `--dry-run` (the same selection, nothing moved: cheap on a busy machine)."""
    if any("." in flag for flag in flags):
        flags = resolve(flags, dlq(processor.endpoint))
    result = redrive(capsys, processor.endpoint, "--dry-run", *flags)
    assert result.code == 0, result
    assert {label(letter) for letter in result.json()["messages"]} == selected
    assert result.json()["skipped"] + result.json()["kept"] == len(MIX) - len(selected)


def test_cli_redrive_of_a_type_no_message_has_names_the_types_there(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mistyped `--type` selects nothing, which is no error; the redrive says so and names the types the
    DLQ's messages have, in the dry run, the redrive itself and its JSON."""
    endpoint = processor.endpoint
    note = "no message in the DLQ has type 'wiat'; the types there: spark, wait"
    dry = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--type", "wiat", "--dry-run")
    assert dry.code == 0 and note in " ".join(dry.out.split()), dry
    moved = run(capsys, "--endpoint-url", endpoint, "dlq", "redrive", "--type", "wiat", "--yes")
    assert moved.code == 0 and "moved 0 message(s)" in moved.out and note in " ".join(moved.out.split()), moved
    report = redrive(capsys, endpoint, "--type", "wiat").json()
    assert (report["moved"], report["notes"], report["job_types"]) == (0, [note], ["spark", "wait"])
    assert dlq(endpoint).keys() == MIX.keys(), "nothing moved"
    assert redrive(capsys, endpoint, "--dry-run", "--type", "wait").json()["notes"] == [], "a type there: no note"


def test_cli_redrive_since_names_a_value_it_cannot_read(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str]
) -> None:
    """A usage error: refused before the command connects, so nothing moves."""
    for bad in ("30x", "5s", "-5m", "m", "1.5h", "yesterday"):
        result = redrive(capsys, processor.endpoint, f"--since={bad}")
        assert_one_line_error(result, 2, "--since", "30m, 2h, 1d", repr(bad))


def test_cli_redrive_since_a_relative_age_moves_only_what_was_dead_lettered_since(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = processor.endpoint
    split = time.time()
    # Dead-lettered again after `split` (a poison job: it comes back at once).
    assert_moved_exactly(capsys, processor, ["--job-id", "spark-bad", "--include-poison"], {"spark-bad"})
    iso = datetime.fromtimestamp(split, UTC).isoformat()
    dry = redrive(capsys, endpoint, "--dry-run", "--since", iso, "--include-poison")
    assert {label(letter) for letter in dry.json()["messages"]} == {"spark-bad"}, "an ISO 8601 time"

    # An age read 30 minutes after `split` (the command's clock alone; the runtime keeps its own): since `split`.
    monkeypatch.setattr(cli_main, "time", SimpleNamespace(time=lambda: split + 30 * 60))
    assert_moved_exactly(capsys, processor, ["--since", "30m", "--include-poison"], {"spark-bad"})
    for now, age, selected in ((split + 2 * 3_600, "2h", {"spark-bad"}), (split + 25 * 3_600, "1d", set())):
        monkeypatch.setattr(cli_main, "time", SimpleNamespace(time=lambda now=now: now))
        dry = redrive(capsys, endpoint, "--dry-run", "--since", age, "--include-poison")
        assert {label(letter) for letter in dry.json()["messages"]} == selected, age


def test_cli_redrive_include_poison_alone_moves_everything_with_the_move_task(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str]
) -> None:
    """No filter and `--include-poison`: SQS's message move task (the offline runtime has one) moves all,
    the cancelled job too; it runs again. Last: the cancelled job does not come back to the DLQ."""
    endpoint = processor.endpoint
    before = dlq(endpoint)
    assert before.keys() == MIX.keys()

    result = redrive(capsys, endpoint, "--include-poison")

    assert result.code == 0, result
    report = result.json()
    assert (report["method"], report["approximate_messages"]) == ("move-task", len(MIX)), report
    assert report["task_handle"]
    back = eventually(
        lambda: (found := dlq(endpoint)).keys() == MIX.keys() - {CANCELLED} and found,
        "everything moved; all but the cancelled job back in the DLQ, under new ids",
    )
    assert not {letter["message_id"] for letter in back.values()} & {letter["message_id"] for letter in before.values()}
    eventually(processor.running_executions, "the cancelled job running again")
