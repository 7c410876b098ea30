"""A job run outlives its execution: the receiver asks the runner before a job's next attempt
(`longjobs.engine.runs`), with botocore's Stubber for EMR Serverless, Glue and the execution's history (it
holds each request and answer to the service's model; moto's runs end at once, it has no BatchStopJobRun,
and its Step Functions runs no EMR Serverless task), and the receiver on moto with the rendered workflow.

AWS's word: on a `.sync` task, when the execution is stopped, Step Functions makes a best-effort attempt
to stop the job and does not wait for it (https://docs.aws.amazon.com/step-functions/latest/dg/
connect-to-resource.html, "Run a Job"); an execution's history holds a `TaskSubmitted` event whose output
is the response of the task's call (https://docs.aws.amazon.com/step-functions/latest/apireference/
API_TaskSubmittedEventDetails.html), for `emr-serverless:startJobRun.sync` StartJobRun's, which names the run
(https://docs.aws.amazon.com/step-functions/latest/dg/connect-emr-serverless.html,
https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_StartJobRun.html); GetJobRun reads a run
by its id (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_GetJobRun.html); ListJobRuns
filters by states and creation time, and a listing of several states comes grouped by state
(https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_ListJobRuns.html); GetJobRuns returns
the runs newest first (https://docs.aws.amazon.com/glue/latest/webapi/API_GetJobRuns.html)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from longjobs.engine.delivery.attempt import lock_hold
from longjobs.engine.delivery.decision import LockState
from longjobs.engine.delivery.types import Outcome
from longjobs.engine.execution import execution_arn
from longjobs.engine.lease import Lock, job_lock_key
from longjobs.engine.runs import EXECUTION_ARGUMENT, JobRuns, RunPlace, parse_places, place_setting
from longjobs.engine.settings import Settings
from tests.functional.conftest import STATE_MACHINE_ARN, Flow

REGION = "us-east-1"
ROLE = "arn:aws:iam::123456789012:role/emr-job"
GONE = execution_arn(STATE_MACHINE_ARN, "m-gone-1")


def emr_summary(run_id: str, name: str, state: str) -> dict[str, Any]:
    at = datetime.now(UTC)
    return {
        "applicationId": "00app",
        "id": run_id,
        "name": name,
        "arn": f"arn:aws:emr-serverless:{REGION}:123456789012:/applications/00app/jobruns/{run_id}",
        "createdBy": ROLE,
        "createdAt": at,
        "updatedAt": at,
        "executionRole": ROLE,
        "state": state,
        "stateDetails": state.lower(),
        "releaseLabel": "emr-7.5.0",
    }


def emr_run(run_id: str, state: str) -> dict[str, Any]:
    """GetJobRun's answer (its required fields): a listing's summary of the run, named by `jobRunId`."""
    run = {key: value for key, value in emr_summary(run_id, "m-gone-1", state).items() if key != "id"}
    return {
        "jobRun": {**run, "jobRunId": run_id, "jobDriver": {"sparkSubmit": {"entryPoint": "s3://assets/glue_entry.py"}}}
    }


def history(*events: tuple[str, dict[str, Any] | None]) -> dict[str, Any]:
    """GetExecutionHistory's answer: `events` as (type, details), numbered from 1. Details of a Task event
    name the EMR Serverless task unless they name a resource of their own."""
    answered: list[dict[str, Any]] = []
    for number, (kind, details) in enumerate(events, start=1):
        event: dict[str, Any] = {
            "timestamp": datetime.now(UTC),
            "type": kind,
            "id": number,
            "previousEventId": number - 1,
        }
        if kind.startswith("Task"):
            field = f"{kind[0].lower()}{kind[1:]}EventDetails"  # taskScheduledEventDetails, ...
            event[field] = {"resourceType": "emr-serverless", "resource": "startJobRun.sync", **(details or {})}
            if kind == "TaskScheduled":
                event[field].setdefault("region", REGION)
                event[field].setdefault("parameters", "{}")
        answered.append(event)
    return {"events": answered}


def submitted(run_id: str, **answer: str) -> tuple[str, dict[str, Any]]:
    """The `TaskSubmitted` event of a start that StartJobRun answered with `run_id` (as the integration spells
    its fields, unless `answer` spells them)."""
    output = answer or {"ApplicationId": "00app", "JobRunId": run_id, "Arn": f"arn:.../jobruns/{run_id}"}
    return "TaskSubmitted", {"output": json.dumps(output)}


SCHEDULED = ("TaskScheduled", None)
STARTED = ("ExecutionStarted", None)
ABORTED = ("ExecutionAborted", None)
ASKED = {"executionArn": GONE, "maxResults": 1000}


def emr_runs(moto_clients: tuple[Any, Any]) -> JobRuns:
    emr, sfn = moto_clients
    return JobRuns({"spark": RunPlace("emr_serverless", name="00app")}, lambda service: emr, sfn)


@pytest.fixture
def clients(moto_aws: None) -> tuple[Any, Any]:
    return boto3.client("emr-serverless", region_name=REGION), boto3.client("stepfunctions", region_name=REGION)


def test_job_runs_emr_run_read_by_its_id_is_asked_to_stop_and_waited_for(clients: tuple[Any, Any]) -> None:
    """The run's id comes from the execution's history; GetJobRun reads its state. A live run is asked to
    stop (once: a CANCELLING run is waited for, not asked again); an ended one lets the job go on. No
    listing is read, so no run can slip between its pages."""
    emr, sfn = clients
    runs, since = emr_runs(clients), time.time() - 30
    events = history(STARTED, SCHEDULED, submitted("00r1"), ABORTED)
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        for state in ("RUNNING", "CANCELLING", "CANCELLED"):
            sfn_stub.add_response("get_execution_history", events, ASKED)
            emr_stub.add_response("get_job_run", emr_run("00r1", state), {"applicationId": "00app", "jobRunId": "00r1"})
            if state == "RUNNING":
                emr_stub.add_response(
                    "cancel_job_run",
                    {"applicationId": "00app", "jobRunId": "00r1"},
                    {"applicationId": "00app", "jobRunId": "00r1"},
                )
        assert runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "its run is still running"
        assert runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "cancelling: not asked again"
        assert not runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "once it ended, no wait"
        emr_stub.assert_no_pending_responses()
        sfn_stub.assert_no_pending_responses()


@pytest.mark.parametrize("state", ["SUCCESS", "FAILED", "CANCELLED"])
def test_job_runs_emr_run_read_ended_is_not_waited_for(clients: tuple[Any, Any], state: str) -> None:
    emr, sfn = clients
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(STARTED, SCHEDULED, submitted("00r1"), ABORTED), ASKED)
        emr_stub.add_response("get_job_run", emr_run("00r1", state), {"applicationId": "00app", "jobRunId": "00r1"})
        assert not emr_runs(clients).running("spark", GONE, since=time.time(), ended_at=None, now=time.time())
        emr_stub.assert_no_pending_responses()


def test_job_runs_emr_every_start_of_the_task_is_read(clients: tuple[Any, Any]) -> None:
    """A task retried after its start was answered (a later error of the task) has a `TaskSubmitted` per
    start: every run named is read, and each one live is asked to stop. The service's own spelling of the
    answer's fields (`jobRunId`) is read as the integration's (`JobRunId`)."""
    emr, sfn = clients
    events = history(
        STARTED, SCHEDULED, submitted("00r1"), SCHEDULED, submitted("", applicationId="00app", jobRunId="00r2"), ABORTED
    )
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", events, ASKED)
        emr_stub.add_response("get_job_run", emr_run("00r1", "FAILED"), {"applicationId": "00app", "jobRunId": "00r1"})
        emr_stub.add_response("get_job_run", emr_run("00r2", "RUNNING"), {"applicationId": "00app", "jobRunId": "00r2"})
        emr_stub.add_response("cancel_job_run", {"applicationId": "00app", "jobRunId": "00r2"})
        assert emr_runs(clients).running("spark", GONE, since=time.time(), ended_at=None, now=time.time())
        emr_stub.assert_no_pending_responses()


def test_job_runs_emr_history_read_in_pages(clients: tuple[Any, Any]) -> None:
    emr, sfn = clients
    first, second = history(STARTED, SCHEDULED), history(STARTED, SCHEDULED, submitted("00r1"), ABORTED)
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", {**first, "nextToken": "more"}, ASKED)
        sfn_stub.add_response("get_execution_history", {"events": second["events"][2:]}, {**ASKED, "nextToken": "more"})
        emr_stub.add_response("get_job_run", emr_run("00r1", "SUCCESS"), {"applicationId": "00app", "jobRunId": "00r1"})
        assert not emr_runs(clients).running("spark", GONE, since=time.time(), ended_at=None, now=time.time())
        sfn_stub.assert_no_pending_responses()


@pytest.mark.parametrize(("listed", "running"), [([], False), (["m-gone-1"], True)])
def test_job_runs_emr_start_whose_answer_is_not_in_the_history_is_looked_for_by_name(
    clients: tuple[Any, Any], listed: list[str], running: bool
) -> None:
    """A start scheduled with no `TaskSubmitted` after it (its answer was lost after the run was created,
    and the execution stopped before a retry): the run has no id to read, so it is looked for by name in
    ListJobRuns, created within the execution's life: from its start to its end, with a minute each side."""
    emr, sfn = clients
    since, ended_at = time.time() - 600, time.time() - 30
    window = {
        "applicationId": "00app",
        "states": ["SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING"],
        "createdAtAfter": datetime.fromtimestamp(since - 60, UTC),
        "createdAtBefore": datetime.fromtimestamp(ended_at + 60, UTC),
    }
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(STARTED, SCHEDULED, ABORTED), ASKED)
        emr_stub.add_response(
            "list_job_runs", {"jobRuns": [emr_summary("00r1", name, "RUNNING") for name in listed]}, window
        )
        if listed:
            emr_stub.add_response("cancel_job_run", {"applicationId": "00app", "jobRunId": "00r1"})
        assert emr_runs(clients).running("spark", GONE, since=since, ended_at=ended_at, now=time.time()) is running
        emr_stub.assert_no_pending_responses()


@pytest.mark.parametrize(("events", "running"), [((STARTED, ABORTED), False), ((STARTED,), True)])
def test_job_runs_emr_task_never_scheduled(clients: tuple[Any, Any], events: Any, running: bool) -> None:
    """An execution that ended before its EMR Serverless task (a failure before the job's step) started no
    run: nothing to wait for, and nothing asked of EMR Serverless. While it runs it may still start one."""
    emr, sfn = clients
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(*events), ASKED)
        assert emr_runs(clients).running("spark", GONE, since=time.time(), ended_at=None, now=time.time()) is running
        emr_stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    "events",
    [
        (STARTED, SCHEDULED, ("TaskStarted", None)),
        (STARTED, SCHEDULED, ("TaskStarted", None), ("TaskFailed", {"error": "EMRServerless.ThrottlingException"})),
        (STARTED, SCHEDULED, submitted("00r1"), ABORTED, ("ExecutionRedriven", None)),
    ],
    ids=["start-in-flight", "start-failed-retry-to-come", "redriven"],
)
def test_job_runs_emr_execution_not_ended_counts_as_running(clients: tuple[Any, Any], events: Any) -> None:
    """An execution that has not ended may still create a run that no listing can see yet: a start in
    flight, a Retry of a failed start, or a redriven execution, whose unsuccessful step runs again
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_RedriveExecution.html). It counts
    as running, with no listing; a run its history names is still read by its id."""
    emr, sfn = clients
    listed: list[str] = []
    emr.meta.events.register(
        "provide-client-params.emr-serverless.ListJobRuns", lambda params, **_: listed.append("list")
    )
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(*events), ASKED)
        if any(kind == "TaskSubmitted" for kind, _ in events):
            emr_stub.add_response(
                "get_job_run", emr_run("00r1", "CANCELLED"), {"applicationId": "00app", "jobRunId": "00r1"}
            )
        assert emr_runs(clients).running("spark", GONE, since=time.time() - 60, ended_at=None, now=time.time())
        emr_stub.assert_no_pending_responses()
    assert listed == [], "a listing cannot see a run not created yet"


@pytest.mark.parametrize(
    ("code", "status"),
    [("ThrottlingException", 400), ("ServiceUnavailable", 503), ("AccessDeniedException", 400)],
)
def test_job_runs_emr_history_unreadable_counts_as_running(clients: tuple[Any, Any], code: str, status: int) -> None:
    """A history that cannot be read names no run: counted as running, and nothing is listed instead."""
    emr, sfn = clients
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_client_error("get_execution_history", service_error_code=code, http_status_code=status)
        assert emr_runs(clients).running("spark", GONE, since=time.time(), ended_at=None, now=time.time())
        emr_stub.assert_no_pending_responses()


def test_job_runs_emr_history_no_longer_kept_is_looked_for_by_name(clients: tuple[Any, Any]) -> None:
    """Step Functions keeps a closed execution's history for a time only: ExecutionDoesNotExist leaves the
    run to be looked for by name (here on moto, whose application does not exist: counted as running)."""
    emr, sfn = clients
    asked: list[str] = []
    emr.meta.events.register(
        "provide-client-params.emr-serverless.ListJobRuns", lambda params, **_: asked.append("list")
    )
    with Stubber(sfn) as sfn_stub:
        sfn_stub.add_client_error("get_execution_history", service_error_code="ExecutionDoesNotExist")
        assert emr_runs(clients).running("spark", GONE, since=time.time(), ended_at=None, now=time.time())
    assert asked == ["list"]


def glue_page(*runs: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    return {"JobRuns": list(runs), **({"NextToken": token} if token else {})}


def glue_run(run_id: str, execution: str, state: str, started: float) -> dict[str, Any]:
    return {
        "Id": run_id,
        "JobName": "spark-job",
        "JobRunState": state,
        "StartedOn": datetime.fromtimestamp(started, UTC),
        "Arguments": {EXECUTION_ARGUMENT: execution, "--params": "{}"},
    }


def test_job_runs_glue_run_found_by_its_argument_is_stopped(moto_aws: None) -> None:
    glue = boto3.client("glue", region_name=REGION)
    now = time.time()
    runs = JobRuns({"spark": RunPlace("glue", name="spark-job")}, lambda service: glue)
    with Stubber(glue) as stub:
        stub.add_response(
            "get_job_runs",
            glue_page(glue_run("jr_2", "m-other-1", "RUNNING", now - 10), token="next"),
            {"JobName": "spark-job", "MaxResults": 200},
        )
        stub.add_response(
            "get_job_runs",
            glue_page(glue_run("jr_1", "m-gone-1", "RUNNING", now - 100)),
            {"JobName": "spark-job", "MaxResults": 200, "NextToken": "next"},
        )
        stub.add_response(
            "batch_stop_job_run",
            {"SuccessfulSubmissions": [{"JobName": "spark-job", "JobRunId": "jr_1"}], "Errors": []},
            {"JobName": "spark-job", "JobRunIds": ["jr_1"]},
        )
        assert runs.running("spark", GONE, since=now - 120, ended_at=None, now=now)
        stub.assert_no_pending_responses()


@pytest.mark.parametrize(
    ("state", "started_ago_s", "running"),
    [
        ("STOPPING", 100, True),  # asked already: waited for, not asked again
        ("SUCCEEDED", 100, False),
        ("STOPPED", 100, False),
        ("RUNNING", 400, False),  # begun before the lock was taken: another attempt's, not this one's
    ],
)
def test_job_runs_glue_states(moto_aws: None, state: str, started_ago_s: float, running: bool) -> None:
    glue = boto3.client("glue", region_name=REGION)
    now = time.time()
    runs = JobRuns({"spark": RunPlace("glue", name="spark-job")}, lambda service: glue)
    with Stubber(glue) as stub:
        stub.add_response(
            "get_job_runs", glue_page(glue_run("jr_1", "m-gone-1", state, now - started_ago_s), token="more")
        )
        assert runs.running("spark", GONE, since=now - 200, ended_at=None, now=now) is running
        stub.assert_no_pending_responses()  # no page past a run older than the lock, no stop of a STOPPING run


def test_job_runs_unknown_answer_counts_as_running(clients: tuple[Any, Any]) -> None:
    emr, sfn = clients  # moto: the application does not exist
    with Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(STARTED, SCHEDULED, submitted("00r1"), ABORTED), ASKED)
        runs = JobRuns({"spark": RunPlace("emr_serverless", name="00nosuchapp")}, lambda service: emr, sfn)
        assert runs.running("spark", GONE, since=time.time(), ended_at=None, now=time.time()), (
            "a run that cannot be read: waiting is safe, running twice is not"
        )
    no_history = JobRuns({"spark": RunPlace("emr_serverless", name="00app")}, lambda service: emr)
    assert no_history.running("spark", GONE, since=time.time(), ended_at=None, now=time.time()), "no history client"


@pytest.mark.parametrize(("code", "status"), [("ThrottlingException", 400), ("InternalServerException", 500)])
def test_job_runs_cancel_refused_counts_as_running_and_is_asked_again(
    clients: tuple[Any, Any], code: str, status: int
) -> None:
    """CancelJobRun may fail with InternalServerException (500) or a common error such as ThrottlingException
    (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_CancelJobRun.html, CommonErrors.html).
    The run then still runs: the job's next attempt waits, and the next ask, finding it running, cancels it
    again. The campaign's seeds rarely meet a run that outlived its execution, and none has drawn these
    faults on its cancel."""
    emr, sfn = clients
    runs, since = emr_runs(clients), time.time() - 30
    events = history(STARTED, SCHEDULED, submitted("00r1"), ABORTED)
    with Stubber(emr) as stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", events, ASKED)
        stub.add_response("get_job_run", emr_run("00r1", "RUNNING"))
        stub.add_client_error("cancel_job_run", service_error_code=code, http_status_code=status)
        assert runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "a refused cancel: running"
        sfn_stub.add_response("get_execution_history", events, ASKED)
        stub.add_response("get_job_run", emr_run("00r1", "RUNNING"))
        stub.add_response(
            "cancel_job_run",
            {"applicationId": "00app", "jobRunId": "00r1"},
            {"applicationId": "00app", "jobRunId": "00r1"},
        )
        assert runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "asked to stop again"
        stub.assert_no_pending_responses()


@pytest.mark.parametrize(("ended_ago_s", "running"), [(None, False), (10.0, True), (59.0, True), (61.0, False)])
def test_job_runs_worker_run_ends_within_its_heartbeat_timeout(ended_ago_s: float | None, running: bool) -> None:
    runs = JobRuns({"spark": RunPlace("worker", heartbeat_s=60)}, None)
    ended = None if ended_ago_s is None else 1000.0 - ended_ago_s
    assert runs.running("spark", GONE, since=0.0, ended_at=ended, now=1000.0) is running
    assert not runs.running("wait", GONE, since=0.0, ended_at=999.0, now=1000.0), "a type with no runs"


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("[1]", "must be a JSON object"),
        ('{"spark": {"emr_application": ""}}', "spark"),
        ('{"spark": {"glue_job": "a", "emr_application": "b"}}', "one of"),
        ('{"spark": {"worker_heartbeat_s": 0}}', "worker_heartbeat_s=0"),
        ("{", "not JSON"),
    ],
)
def test_job_runs_setting_refused_names_what_is_wrong(raw: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Settings.load({"job_runs": raw})


def test_job_runs_setting_round_trip() -> None:
    places = {
        "a": RunPlace("emr_serverless", name="00app"),
        "b": RunPlace("glue", name="job-b"),
        "c": RunPlace("worker", heartbeat_s=60.0),
    }
    assert parse_places(place_setting(places)) == places


def test_job_runs_retry_waits_in_place_while_the_previous_run_ends(flow: Flow) -> None:
    """The receiver's side: a job id whose lock another execution freed a moment ago, its run ending
    (the offline worker's reach: its step's heartbeat timeout), waits in place; once that reach has
    passed, the same message starts. The lock, untaken meanwhile, still names the previous execution."""
    flow.receiver.runs = JobRuns({"wait": RunPlace("worker", heartbeat_s=600)}, None)
    flow.receiver.settings = flow.receiver.settings.model_copy(update={"job_wait_base_s": 1, "job_wait_cap_s": 1})
    locks = flow.receiver.store.locks
    now = time.time()
    key = job_lock_key("ending")
    assert locks.take(key, holder="m-gone", execution_arn=GONE, now=now - 60, hold_until=now + 600)
    assert locks.release(key, GONE, now=now - 5)
    message_id = flow.send_job("ending", seconds=1)
    assert flow.deliver() == {message_id: Outcome.HELD}, "its job's previous run may still be running"
    lock = locks.get(key)
    assert lock is not None and not lock.held and lock.execution_arn == GONE
    assert flow.harness.visible_messages() == [], "hidden for the wait, not sent back as a copy"

    flow.receiver.runs = JobRuns({"wait": RunPlace("worker", heartbeat_s=1)}, None)  # its reach has passed
    outcomes: dict[str, Outcome] = {}
    deadline = time.monotonic() + 40
    while not outcomes and time.monotonic() < deadline:
        outcomes = flow.deliver(wait_s=1)
    assert outcomes == {message_id: Outcome.STARTED}


def emr_runs_of_wait(flow: Flow) -> tuple[Any, Any, list[dict[str, Any]]]:
    """The `wait` type's runs placed on an EMR Serverless application, read through clients the test stubs
    (moto runs no EMR Serverless task): the EMR client, the Step Functions client, and the ListJobRuns
    requests made."""
    emr = boto3.client("emr-serverless", region_name=REGION)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    listed: list[dict[str, Any]] = []
    emr.meta.events.register(
        "provide-client-params.emr-serverless.ListJobRuns", lambda params, **_: listed.append(params)
    )
    flow.receiver.runs = JobRuns({"wait": RunPlace("emr_serverless", name="00app")}, lambda service: emr, sfn)
    return emr, sfn, listed


def keep_hidden(flow: Flow, message_id: str) -> None:
    """The message hidden for 5 minutes, as the extender's renewals would keep it while its execution runs
    (the flow runs no extender here): the test's steps may take longer than its 5 s visibility on a busy
    machine, and its redelivery would then join the batch that receives the next message."""
    handle = flow.lease(message_id).receipt_handle
    flow.sqs.change_message_visibility(QueueUrl=flow.harness.queue_url, ReceiptHandle=handle, VisibilityTimeout=300)


def test_job_runs_asked_about_since_the_execution_began_not_the_lock_taken_again(flow: Flow) -> None:
    """A redelivery that adopts a running execution takes its lock again, which rewrites the lock's time of
    taking. A run looked for by name is looked for from its execution's start (DescribeExecution), so an
    adoption late in a long run cannot hide it: here the lock was taken again an hour after the run began.
    Its history (stubbed: moto runs no EMR Serverless task) shows a start whose answer never came."""
    emr, sfn, asked = emr_runs_of_wait(flow)
    first = flow.send_job("adopted", seconds=30)
    assert flow.deliver() == {first: Outcome.STARTED}
    keep_hidden(flow, first)
    arn = flow.lease(first).execution_arn or ""
    flow.abort(arn)  # its stop landed; its run goes on (the cancel was lost)
    described = flow.harness.stepfunctions.describe_execution(executionArn=arn)
    started, stopped = described["startDate"].timestamp(), described["stopDate"].timestamp()
    locks, key = flow.receiver.store.locks, job_lock_key("adopted")
    assert locks.take(key, holder=first, execution_arn=arn, now=started + 3600, hold_until=started + 7200)

    second = flow.send_job("adopted", seconds=1)
    with Stubber(emr) as stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(STARTED, SCHEDULED, ABORTED))
        stub.add_response("list_job_runs", {"jobRuns": [emr_summary("00r1", arn.rpartition(":")[2], "RUNNING")]})
        stub.add_response("cancel_job_run", {"applicationId": "00app", "jobRunId": "00r1"})
        assert flow.deliver() == {second: Outcome.HELD}, "the aborted execution's run still goes on"
    assert asked[0]["createdAtAfter"].timestamp() == pytest.approx(started - 60, abs=0.01)
    assert asked[0]["createdAtBefore"].timestamp() == pytest.approx(stopped + 60, abs=0.01), "until its end"


def test_job_runs_execution_that_ran_no_emr_task_holds_nothing(flow: Flow) -> None:
    """The receiver reads the stopped execution's history on moto: its job step is not EMR Serverless's (the
    offline token step), so it started no run there, and the job's next attempt starts at once."""
    emr = boto3.client("emr-serverless", region_name=REGION)
    flow.receiver.runs = JobRuns(
        {"wait": RunPlace("emr_serverless", name="00app")}, lambda service: emr, flow.receiver.stepfunctions
    )
    first = flow.send_job("gone", seconds=30)
    assert flow.deliver() == {first: Outcome.STARTED}
    keep_hidden(flow, first)
    arn = flow.lease(first).execution_arn or ""
    flow.abort(arn)
    second = flow.send_job("gone", seconds=1)
    with Stubber(emr) as stub:  # nothing asked of EMR Serverless
        assert flow.deliver() == {second: Outcome.STARTED}
        stub.assert_no_pending_responses()


def test_job_runs_lock_taken_as_it_was_read(flow: Flow) -> None:
    """The run check judged the lock as read: a take made on that reading fails when another message of the
    job took the lock, ran and freed it meanwhile (its run was never asked about), absent or free."""
    locks, dynamodb = flow.receiver.store.locks, flow.receiver.store.locks._client
    now = time.time()
    mine = execution_arn(STATE_MACHINE_ARN, "m-mine-1")

    def take(key: str, state: LockState, read: Lock | None) -> bool:
        hold = lock_hold(key, state, read)
        request = locks.take_request(
            hold.key,
            holder="m-mine",
            execution_arn=mine,
            now=now,
            hold_until=now + 60,
            over=hold.over,
            fresh=hold.fresh,
        )
        try:
            dynamodb.put_item(**request)
        except dynamodb.exceptions.ConditionalCheckFailedException:
            return False
        return True

    for job_id, read_free in (("was-absent", False), ("was-free", True)):
        key = job_lock_key(job_id)
        if read_free:
            assert locks.take(key, holder="m-gone", execution_arn=GONE, now=now - 600, hold_until=now)
            assert locks.release(key, GONE, now=now - 500)
        read = locks.get(key)
        other = execution_arn(STATE_MACHINE_ARN, f"m-other-{job_id}")
        assert locks.take(key, holder="m-other", execution_arn=other, now=now - 30, hold_until=now)
        assert locks.release(key, other, now=now - 1)  # ran and freed the lock since the reading
        state = LockState.FREE
        assert not take(key, state, read), f"{job_id}: taken over a run never asked about"
        assert take(key, state, locks.get(key)), f"{job_id}: read again, it is taken"


def test_job_runs_lock_freed_before_its_execution_ended_waits_for_that_end(flow: Flow) -> None:
    """The receiver's side of an execution not ended: the job lock is free, but the execution that freed it
    still runs (here on moto, a job step still waiting), and its history shows its EMR Serverless task
    scheduled with no answer yet: a StartJobRun in flight. The job id's next message waits in place, and no
    listing is asked, since a run not created yet is in none. Once the execution has ended (StopExecution
    answers its stop date: https://docs.aws.amazon.com/step-functions/latest/apireference/API_StopExecution.html)
    no start of it can come any more: the same history, closed, is looked for by name, and with no run found
    the message starts."""
    emr, sfn, listed = emr_runs_of_wait(flow)
    flow.receiver.settings = flow.receiver.settings.model_copy(update={"job_wait_base_s": 1, "job_wait_cap_s": 1})
    first = flow.send_job("finishing", seconds=30)
    assert flow.deliver() == {first: Outcome.STARTED}
    arn = flow.lease(first).execution_arn or ""
    locks, key = flow.receiver.store.locks, job_lock_key("finishing")
    assert locks.release(key, arn, now=time.time()), "freed by its execution, which has not ended"
    assert flow.receiver.stepfunctions.describe_execution(executionArn=arn)["status"] == "RUNNING"
    asked = {"executionArn": arn, "maxResults": 1000}
    in_flight = (STARTED, SCHEDULED, ("TaskStarted", None))

    second = flow.send_job("finishing", seconds=1)
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(*in_flight), asked)
        emr_stub.add_response("list_job_runs", {"jobRuns": []})  # what a listing would say: no run yet
        assert flow.deliver() == {second: Outcome.HELD}, "its start may still create a run"
    assert listed == [], "a listing cannot see a run not created yet"
    lock = locks.get(key)
    assert lock is not None and not lock.held and lock.execution_arn == arn, "the lock is left untaken"

    flow.abort(arn)
    outcomes: dict[str, Outcome] = {}
    with Stubber(emr) as emr_stub, Stubber(sfn) as sfn_stub:
        sfn_stub.add_response("get_execution_history", history(*in_flight, ABORTED), asked)
        emr_stub.add_response("list_job_runs", {"jobRuns": []})
        deadline = time.monotonic() + 40
        while second not in outcomes and time.monotonic() < deadline:
            outcomes.update(flow.deliver(wait_s=1))
        emr_stub.assert_no_pending_responses()
    assert outcomes.pop(second, None) is Outcome.STARTED, "ended, it starts nothing more: none found, the job goes on"
    # The stopped execution's own message may show again meanwhile: its redelivery settles it by that end.
    assert outcomes in ({}, {first: Outcome.SETTLED}), outcomes
    assert len(listed) == 1, "the unanswered start looked for by name once"
