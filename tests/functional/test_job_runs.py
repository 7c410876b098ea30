"""A job run outlives its execution: the receiver asks the runner before a job's next attempt
(`longjobs.engine.runs`), with botocore's Stubber for EMR Serverless and Glue (it holds each request and
answer to the service's model; moto's runs end at once, and it has no BatchStopJobRun), and the receiver
on moto with the rendered workflow.

AWS's word: on a `.sync` task, when the execution is stopped, Step Functions makes a best-effort attempt
to stop the job and does not wait for it (https://docs.aws.amazon.com/step-functions/latest/dg/
connect-to-resource.html, "Run a Job"); ListJobRuns filters by states and creation time
(https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_ListJobRuns.html); GetJobRuns returns
the runs newest first (https://docs.aws.amazon.com/glue/latest/webapi/API_GetJobRuns.html)."""

from __future__ import annotations

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


def test_job_runs_emr_run_of_an_ended_execution_is_asked_to_stop_and_waited_for(moto_aws: None) -> None:
    """Stubber, not moto: moto's EMR Serverless runs end at once and keep only the day they began."""
    emr = boto3.client("emr-serverless", region_name=REGION)
    runs = JobRuns({"spark": RunPlace("emr_serverless", name="00app")}, lambda service: emr)
    since = time.time() - 30
    live = ["SUBMITTED", "PENDING", "SCHEDULED", "RUNNING", "QUEUED", "CANCELLING"]
    with Stubber(emr) as stub:
        stub.add_response(
            "list_job_runs",
            {"jobRuns": [emr_summary("00r2", "m-other-1", "RUNNING")], "nextToken": "next"},
            {"applicationId": "00app", "states": live, "createdAtAfter": datetime.fromtimestamp(since - 60, UTC)},
        )
        stub.add_response(
            "list_job_runs",
            {"jobRuns": [emr_summary("00r1", "m-gone-1", "RUNNING")]},
            {
                "applicationId": "00app",
                "states": live,
                "createdAtAfter": datetime.fromtimestamp(since - 60, UTC),
                "nextToken": "next",
            },
        )
        stub.add_response(
            "cancel_job_run",
            {"applicationId": "00app", "jobRunId": "00r1"},
            {"applicationId": "00app", "jobRunId": "00r1"},
        )
        assert runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "its run is still running"
        stub.add_response("list_job_runs", {"jobRuns": [emr_summary("00r1", "m-gone-1", "CANCELLING")]})
        assert runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "cancelling: not asked again"
        stub.add_response("list_job_runs", {"jobRuns": [emr_summary("00r2", "m-other-1", "RUNNING")]})
        assert not runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "once it ended, no wait"
        stub.assert_no_pending_responses()


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


def test_job_runs_unknown_answer_counts_as_running(moto_aws: None) -> None:
    emr = boto3.client("emr-serverless", region_name=REGION)  # moto: the application does not exist
    runs = JobRuns({"spark": RunPlace("emr_serverless", name="00nosuchapp")}, lambda service: emr)
    assert runs.running("spark", GONE, since=time.time(), ended_at=None, now=time.time()), (
        "an application that cannot be read: waiting is safe, running twice is not"
    )


@pytest.mark.parametrize(("code", "status"), [("ThrottlingException", 400), ("InternalServerException", 500)])
def test_job_runs_cancel_refused_counts_as_running_and_is_asked_again(moto_aws: None, code: str, status: int) -> None:
    """CancelJobRun may fail with InternalServerException (500) or a common error such as ThrottlingException
    (https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_CancelJobRun.html, CommonErrors.html).
    The run then still runs: the job's next attempt waits, and the next ask, finding it running, cancels it
    again. The campaign's seeds rarely meet a run that outlived its execution, and none has drawn these
    faults on its cancel."""
    emr = boto3.client("emr-serverless", region_name=REGION)
    runs = JobRuns({"spark": RunPlace("emr_serverless", name="00app")}, lambda service: emr)
    since = time.time() - 30
    with Stubber(emr) as stub:
        stub.add_response("list_job_runs", {"jobRuns": [emr_summary("00r1", "m-gone-1", "RUNNING")]})
        stub.add_client_error("cancel_job_run", service_error_code=code, http_status_code=status)
        assert runs.running("spark", GONE, since=since, ended_at=None, now=time.time()), "a refused cancel: running"
        stub.add_response("list_job_runs", {"jobRuns": [emr_summary("00r1", "m-gone-1", "RUNNING")]})
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


def test_job_runs_asked_about_since_the_execution_began_not_the_lock_taken_again(flow: Flow) -> None:
    """A redelivery that adopts a running execution takes its lock again, which rewrites the lock's time of
    taking. The run is looked for from its execution's start (DescribeExecution), so an adoption late in
    a long run cannot hide it: here the lock was taken again an hour after the run began."""
    emr = boto3.client("emr-serverless", region_name=REGION)
    asked: list[dict[str, Any]] = []
    emr.meta.events.register(
        "provide-client-params.emr-serverless.ListJobRuns", lambda params, **_: asked.append(params)
    )
    flow.receiver.runs = JobRuns({"wait": RunPlace("emr_serverless", name="00app")}, lambda service: emr)
    first = flow.send_job("adopted", seconds=30)
    assert flow.deliver() == {first: Outcome.STARTED}
    arn = flow.lease(first).execution_arn or ""
    flow.abort(arn)  # its stop landed; its run goes on (the cancel was lost)
    started = flow.harness.stepfunctions.describe_execution(executionArn=arn)["startDate"].timestamp()
    locks, key = flow.receiver.store.locks, job_lock_key("adopted")
    assert locks.take(key, holder=first, execution_arn=arn, now=started + 3600, hold_until=started + 7200)

    second = flow.send_job("adopted", seconds=1)
    with Stubber(emr) as stub:
        stub.add_response("list_job_runs", {"jobRuns": [emr_summary("00r1", arn.rpartition(":")[2], "RUNNING")]})
        stub.add_response("cancel_job_run", {"applicationId": "00app", "jobRunId": "00r1"})
        assert flow.deliver() == {second: Outcome.HELD}, "the aborted execution's run still goes on"
    assert asked[0]["createdAtAfter"].timestamp() == pytest.approx(started - 60, abs=0.01)


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
