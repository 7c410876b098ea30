"""`longjobs lease` follows a parked job on the offline runtime: the whole processor on moto's server, a type
limited to 1 with a 60 s admission horizon, so a backlog is parked in the type's waiting queue (the
stack's, built offline by `create_resources`) and each parked job runs from its copy, a new message id.
The original's lease is the PARKED marker that names the copy; the copy's lease is the attempt."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest

from longjobs.engine.jobs import BUILTIN_TYPES, JobCatalog
from longjobs.engine.settings import Settings
from longjobs.offline.faults import Faults, function_clients
from longjobs.offline.processor import LocalProcessor
from longjobs.offline.resources import WAITING_QUEUE_PREFIX
from longjobs.offline.runtime import captured_logs
from longjobs.offline.serve import SERVE_SETTINGS, Calm
from tests.longjobs_support import run, succeeded
from tests.polling import eventually

LIMITED = "one-at-a-time"
CATALOG = JobCatalog(
    [
        *BUILTIN_TYPES,
        next(t for t in BUILTIN_TYPES if t.name == "wait").model_copy(update={"name": LIMITED, "max_concurrency": 1}),
    ]
)
JOBS = ("first", "second", "third", "fourth")
pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")
"""An invocation that adds no metric flushes none (the scenario runner ignores it too)."""


@pytest.fixture(scope="module")
def processor(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalProcessor]:
    settings = Settings.load({**SERVE_SETTINGS, "admission_horizon_s": 60, "admission_wait_base_s": 1})
    work_dir = tmp_path_factory.mktemp("parking")
    with (
        captured_logs(work_dir / "runtime.log"),  # the functions' logs, off the command's output
        LocalProcessor(settings, catalog=CATALOG, work_dir=work_dir, faults=Faults(Calm(settings))) as made,
    ):
        made.faults.begin()
        yield made


def test_offline_runtime_parks_a_backlog_and_the_lease_view_names_each_copy(
    processor: LocalProcessor, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    endpoint = processor.endpoint
    waiting = processor.resources.waiting_queue_urls
    assert LIMITED in waiting and waiting[LIMITED].endswith(WAITING_QUEUE_PREFIX + LIMITED), "a queue per type"
    assert processor.settings.waiting_queue_urls == waiting, "the functions are told the waiting queue"
    sqs = processor.emulator.sqs()
    # sent before the mapping starts: one batch, so the first runs, the second waits, the rest are parked
    sent = {
        job_id: sqs.send_message(
            QueueUrl=processor.resources.queue_url,
            MessageBody=json.dumps({"job_id": job_id, "type": LIMITED, "params": {"seconds": 1}}),
        )["MessageId"]
        for job_id in JOBS
    }
    processor.start()

    def lease(message_id: str) -> dict[str, Any] | None:
        found = run(capsys, "--endpoint-url", endpoint, "lease", message_id, "--json")
        if found.code != 0:
            return None
        # the functions' per-type metrics (EMF, printed on stdout) share the command's output here
        own = [line for line in found.out.splitlines() if not line.startswith('{"_aws":')]
        story: dict[str, Any] = json.loads("\n".join(own))
        return story

    def done(message_id: str) -> dict[str, Any] | None:
        """The story of the job's last attempt once it succeeded and its execution ended: its own, or its
        copy's when parked."""
        story = lease(message_id)
        if story is None:
            return None
        if story["lease"]["status"] == "PARKED":
            copy = story["lease"]["claimed_by"]
            return done(copy) if copy else None
        return succeeded(story)

    finished: dict[str, dict[str, Any]] = {}
    for job_id, message_id in sent.items():
        finished[job_id] = eventually(lambda m=message_id: done(m), f"{job_id} succeeded")  # type: ignore[misc]

    parked = {job_id for job_id, message_id in sent.items() if (lease(message_id) or {})["lease"]["status"] == "PARKED"}
    # Beyond what the horizon can start: parked (in one batch, `third` and `fourth`; which ones exactly
    # depends on how the mapping's receives split the four, which a loaded machine changes).
    assert parked and "first" not in parked, "beyond what the horizon can start: parked"
    for job_id in parked:
        marker = lease(sent[job_id])
        assert marker is not None and marker["executions"] == [], "the original never ran"
        copy = marker["lease"]["claimed_by"]
        assert copy and copy != sent[job_id] and marker["lease"]["copy_id"] == copy
        story = finished[job_id]
        assert story["lease"]["message_id"] == copy and story["lease"]["job_id"] == job_id
        assert story["lease"]["queue_url"] == waiting[LIMITED], "it ran from the waiting queue"
        assert [e["status"] for e in story["executions"]] == ["SUCCEEDED"], "run once, under the copy's id"
        shown = run(capsys, "--endpoint-url", endpoint, "lease", sent[job_id])
        assert shown.code == 0 and "PARKED" in shown.out
        assert "run by copy" in shown.out and copy in shown.out and job_id in shown.out
    for job_id in set(JOBS) - parked:
        assert finished[job_id]["lease"]["message_id"] == sent[job_id]
    assert processor.running_executions() == []


def test_offline_runtime_builds_the_watchers_admission_on_the_emulator_at_start(processor: LocalProcessor) -> None:
    """The watcher's admission receiver, which a cloud container builds at its first event, is built at
    the runtime's start: its clients reach the emulator although this test's environment names no endpoint."""
    assert "AWS_ENDPOINT_URL" not in os.environ, "the test's environment holds no endpoint"
    admitter = processor.functions["watcher"].admitter()
    assert admitter is not None, "a type is limited: the watcher admits"
    clients = function_clients(admitter)
    assert {client.meta.service_model.service_name for client in clients} == {"sqs", "stepfunctions", "dynamodb"}
    assert {client.meta.endpoint_url for client in clients} == {processor.endpoint}
