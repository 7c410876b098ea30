"""`longjobs cancel` and `longjobs top --once` against the offline runtime: the whole processor (event source
mapping, receiver, extender, watcher, the real workflow) on moto's server, as `serve` runs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from longjobs.engine.jobs import load_catalog
from longjobs.offline.faults import Faults
from longjobs.offline.processor import LocalProcessor
from longjobs.offline.serve import Calm, serve_settings
from tests.longjobs_support import run
from tests.polling import eventually, past_start_check

REASON = "stop the canary"


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessor]:
    settings = serve_settings(None)
    with LocalProcessor(
        settings, catalog=load_catalog(), work_dir=tmp_path_factory.mktemp("offline"), faults=Faults(Calm(settings))
    ) as made:
        made.faults.begin()
        made.start()
        yield made


def test_cli_offline_runtime_publishes_the_renewal_submit_checks_a_wait_with(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    """`serve` with `max_renewal_s` lowered: submit refuses a wait its receiver would dead-letter."""
    settings = serve_settings(None).model_copy(update={"max_renewal_s": 600})
    with LocalProcessor(
        settings, catalog=load_catalog(), work_dir=tmp_path_factory.mktemp("short"), faults=Faults(Calm(settings))
    ) as short:
        refused = run(capsys, "--endpoint-url", short.endpoint, "submit", "wait", "--param", "seconds=900")
    assert refused.code == 1 and "does not end within renewal (600 s" in refused.err, refused


def test_cli_offline_runtime_cancel_of_a_running_job_stops_it_and_dead_letters_it(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    endpoint = processor.endpoint
    sent = run(capsys, "--endpoint-url", endpoint, "submit", "wait", "--param", "seconds=600", "--json")
    message_id = sent.json()["message_id"]
    lease = eventually(
        lambda: (
            (found := run(capsys, "--endpoint-url", endpoint, "lease", message_id, "--json")).code == 0
            and found.json()["executions"]
            and found.json()
        ),
        "the job's execution started",
    )
    assert lease["executions"][0]["status"] == "RUNNING"
    past_start_check(processor.emulator.stepfunctions(), lease["executions"][0]["arn"])

    cancelled = run(capsys, "--endpoint-url", endpoint, "cancel", message_id, "--reason", REASON, "--yes", "--json")

    assert cancelled.code == 0, cancelled
    [report] = cancelled.json()
    assert report["outcome"] == "cancelled" and report["deleted"] and report["execution_stopped"]
    story = eventually(
        lambda: (
            (found := run(capsys, "--endpoint-url", endpoint, "lease", message_id, "--json").json())["executions"][0][
                "status"
            ]
            != "RUNNING"
            and found
        ),
        "the execution stopped",
    )
    assert story["executions"][0]["status"] == "ABORTED"
    assert (story["executions"][0]["error"], story["executions"][0]["cause"]) == ("Cancelled", f"cancelled: {REASON}")
    assert story["lease"]["status"] == "CANCELLED" and story["lease"]["last_error"] == {
        "error": "Cancelled",
        "cause": REASON,
    }
    letters = run(capsys, "--endpoint-url", endpoint, "dlq", "list", "--json").json()
    assert [(letter["error_type"], letter["error_message"]) for letter in letters] == [("Cancelled", REASON)]

    frame = run(capsys, "--endpoint-url", endpoint, "top", "--once")
    data = run(capsys, "--endpoint-url", endpoint, "top", "--json").json()

    assert frame.code == 0 and "job types" in frame.out
    assert data["status"]["leases"]["CANCELLED"] == 1 and data["status"]["dlq"]["total"] == 1
    assert data["status"]["queue"]["total"] == 0, "not given back to the jobs queue"
    assert all(line["running"] == 0 for line in data["types"])
    assert processor.running_executions() == [], "nothing runs the cancelled job again"
