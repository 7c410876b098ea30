"""EMR Serverless runs in the simulation (`longjobs.sim.emr`): what a stop does to a run, the idempotent
start, the checks that a weakened step is caught, and how a retry finds its job's previous run. The
semantics and their AWS pages are in the model's docstring. moto's runs end at once and its Step Functions
runs no EMR Serverless task, so these are the simulation's tests only; the calls the processor makes are
held to moto in `tests/sim/test_contract.py`."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from longjobs.engine.lease import table_definition
from longjobs.engine.runs import EMR_LIVE, EMR_TASK, JobRuns, RunPlace
from longjobs.offline.scenario import parse_scenario
from longjobs.sim import scenario as scenario_module
from longjobs.sim.aws import Execution, FakeAws, FakeStepFunctions
from longjobs.sim.campaign import deployed_workflow, run_seed
from longjobs.sim.emr import EMR_APPLICATION, EmrServerless, JobRun, SchedulerConfiguration
from longjobs.sim.executions import STATE_MACHINE_ARN
from longjobs.sim.scenario import ScenarioRun, run_scenario
from longjobs.sim.scheduler import Scheduler, VirtualClock
from longjobs.sim.trace import Trace
from longjobs.sim.workflow import StatesError
from longjobs.sim.workload import CATALOG, EMR_TYPE, SparkBehaviour

EMR_STEP = "RunSparkEmrJob"


def run(jobs: list[dict[str, Any]], faults: list[dict[str, Any]] = (), **kwargs: Any) -> ScenarioRun:  # type: ignore[assignment]
    [emr] = [declared for declared in CATALOG["job_types"] if declared["name"] == EMR_TYPE]
    scenario = parse_scenario({"job_types": [emr], "jobs": jobs, "faults": list(faults)})
    return run_scenario(scenario, **kwargs)


def emr_events(result: ScenarioRun) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in result.result.trace.records]
    return [record for record in records if record.get("actor") == "emr"]


def test_emr_serverless_job_runs_once_and_succeeds() -> None:
    result = run([{"id": "e1", "type": EMR_TYPE, "params": {}}])

    assert result.result.violation is None
    assert result.jobs["e1"].executions == ["SUCCEEDED"] and result.jobs["e1"].final == "deleted"
    states = [event["state"] for event in emr_events(result) if event["event"] == "job_run_state"]
    assert states == ["RUNNING", "SUCCESS"]


def test_emr_serverless_stopped_execution_cancels_its_run_which_ends_after_it() -> None:
    """StopExecution of a `.sync` task: Step Functions tries to cancel the run (Run a Job,
    https://docs.aws.amazon.com/step-functions/latest/dg/connect-to-resource.html); the run goes
    CANCELLING, then CANCELLED, after its execution ended. The message comes back and runs again."""
    result = run([{"id": "e1", "type": EMR_TYPE, "params": {}}], [{"type": "abort_execution", "job": "e1", "at_s": 20}])

    assert result.result.violation is None
    assert result.jobs["e1"].executions == ["ABORTED", "SUCCEEDED"]
    records = [json.loads(line) for line in result.result.trace.records]
    ended = next(r["t"] for r in records if r.get("event") == "execution_ended" and r["status"] == "ABORTED")
    first = [e for e in emr_events(result) if e.get("run") == "00r0000" and e["event"] == "job_run_state"]
    assert [e["state"] for e in first][-2:] == ["CANCELLING", "CANCELLED"]
    assert all(e["t"] > ended for e in first[-2:]), "the cancel follows the stop; the run outlives its execution"
    assert result.result.coverage["emr:run_outlived_its_execution"] == 1


def test_emr_serverless_start_whose_answer_was_lost_finds_its_run() -> None:
    """A StartJobRun retried by the state's Retry after its answer was lost names the same client token
    (the execution's name), so it finds the run it started instead of starting a second."""
    runs = 0
    for seed in range(40):
        result = run_seed(seed)
        assert result.violation is None, (seed, result.violation)
        if result.coverage["emr:start_answer_lost"]:
            assert result.coverage["emr:start_found_its_run"] >= result.coverage["emr:start_answer_lost"]
            runs += 1
    assert runs, "some seed loses a start's answer"


@pytest.mark.parametrize(
    ("change", "property_name"),
    [
        # a retried start makes a second run of the execution, beside the first: two runs of one job
        ({"ClientToken.$": "States.Format('{}-{}', $$.Execution.Name, $$.State.RetryCount)"}, "single_run_per_job"),
        ({"ExecutionTimeoutMinutes": 720}, "emr_runs_end"),
    ],
    ids=["no idempotent token", "no run limit of the type's"],
)
def test_emr_serverless_weakened_step_is_caught(change: dict[str, Any], property_name: str) -> None:
    """Each weakening of the step that the design relies on breaks a property on some seed."""
    workflow = deployed_workflow()
    definition = json.loads(json.dumps(workflow.definition))
    step = definition["States"]["RunJob"]["Branches"][0]["States"][EMR_STEP]
    step["Parameters"].update(change)
    step["TimeoutSeconds"] = max(step["TimeoutSeconds"], 720 * 60 + 900)
    caught = []
    from longjobs.sim import campaign

    previous = campaign._WORKFLOW
    campaign._WORKFLOW = campaign.DeployedWorkflow(definition, workflow.timeout_s)
    try:
        for seed in range(200):
            violation = run_seed(seed, keep_calls=False).violation
            if violation is not None:
                caught.append((seed, violation.property))
                break
    finally:
        campaign._WORKFLOW = previous
    assert caught and caught[0][1] == property_name, caught


class Application:
    """One EMR Serverless application on its own scheduler, with job concurrency and queuing, and the
    outcome of each run's `.sync` task."""

    def __init__(self, max_concurrent_runs: int, queue_timeout_s: float) -> None:
        self.scheduler = Scheduler(0.0)
        trace = Trace(self.scheduler.now, 0.0)
        configuration = SchedulerConfiguration(max_concurrent_runs, queue_timeout_s)
        self.emr = EmrServerless(
            self.scheduler, trace, 1, faults_active=lambda _: False, reach=lambda _: None, configuration=configuration
        )
        self.outcomes: dict[str, str] = {}

    def submit(
        self,
        name: str,
        seconds: float,
        *,
        at: float = 0.0,
        limit_minutes: int = 720,
        submitted: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """A run named `name`; `submitted` is told StartJobRun's answer (`EmrServerless.run_job`)."""
        parameters = {
            "ClientToken": name,
            "Name": name,
            "ExecutionTimeoutMinutes": limit_minutes,
            "RetryPolicy": {"MaxAttempts": 1},
        }
        behaviour = SparkBehaviour("ok", seconds)

        def task() -> None:
            try:
                self.emr.run_job(parameters, f"arn:{name}", behaviour, None, limit_minutes * 60, submitted=submitted)
                self.outcomes[name] = "SUCCESS"
            except StatesError as error:
                self.outcomes[name] = error.error

        self.scheduler.spawn(task, at=at)

    def run(self, until: float = 100_000.0) -> dict[str, JobRun]:
        self.scheduler.run(until=until)
        return {run.token: run for run in self.emr.runs.values()}


def running_at_once(runs: dict[str, JobRun]) -> int:
    edges = sorted(
        edge
        for run in runs.values()
        if run.running_since is not None and run.ended is not None
        for edge in ((run.running_since, 1), (run.ended, -1))
    )
    most = running = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def test_emr_serverless_application_runs_at_most_its_concurrency_and_queues_in_order() -> None:
    """An application with `maxConcurrentRuns` 2 runs two at once; the others wait QUEUED and start in
    the order they came as runs end ("Job concurrency and queuing for an EMR Serverless application",
    https://docs.aws.amazon.com/emr/latest/EMR-Serverless-UserGuide/applications-concurrency-queuing.html)."""
    app = Application(2, 3_600.0)
    for index, seconds in enumerate((100, 300, 100, 100)):
        app.submit(f"r{index}", seconds, at=float(index))
    runs = app.run()

    assert app.outcomes == {"r0": "SUCCESS", "r1": "SUCCESS", "r2": "SUCCESS", "r3": "SUCCESS"}
    assert running_at_once(runs) == 2
    placed = [runs[name].limit_from for name in ("r2", "r3")]
    assert placed == [runs["r0"].ended, runs["r2"].ended], "r2 takes r0's place, r3 then takes r2's"


def test_emr_serverless_run_queued_past_its_timeout_fails() -> None:
    """A run still QUEUED at `queueTimeoutMinutes` times out: its task fails, and it never ran."""
    app = Application(1, 900.0)
    app.submit("long", 2_000)
    app.submit("queued", 100, at=1.0)
    runs = app.run()

    assert app.outcomes == {"long": "SUCCESS", "queued": "States.TaskFailed"}
    assert runs["queued"].running_since is None and runs["queued"].ended == pytest.approx(901.0)


def test_emr_serverless_cancelled_queued_run_takes_no_place() -> None:
    """A run cancelled while it waits (its execution stopped) leaves the queue: the next takes the place."""
    app = Application(1, 3_600.0)
    app.submit("first", 500)
    app.submit("stopped", 100, at=1.0)
    app.submit("next", 100, at=2.0)
    app.scheduler.call_at(100.0, lambda: app.emr.execution_ended("arn:stopped"))
    runs = app.run()

    assert runs["stopped"].state == "CANCELLED" and runs["stopped"].running_since is None
    assert runs["next"].limit_from == runs["first"].ended and app.outcomes["next"] == "SUCCESS"


def test_emr_serverless_queued_run_limit_counts_from_leaving_the_queue() -> None:
    """A run's `executionTimeoutMinutes` counts from its leaving the queue: the queue has its own timeout.
    Counted from its submission, the second run below would be cancelled after 100 s of its 500."""
    app = Application(1, 3_600.0)
    app.submit("first", 500, limit_minutes=10)
    app.submit("second", 500, limit_minutes=10)
    runs = app.run()

    assert app.outcomes == {"first": "SUCCESS", "second": "SUCCESS"}
    assert runs["second"].ended - runs["second"].submitted > 600
    assert not app.emr.problems(app.scheduler.now())


def calls(result: ScenarioRun, operation: str) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in result.result.trace.records]
    return [record for record in records if record.get("call") == operation]


def test_emr_serverless_retry_reads_the_previous_run_by_its_id_and_waits_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stopped execution whose run of ten minutes goes on (seed 2 loses every cancel of Step Functions): the
    job's retry reads the execution's history, whose `TaskSubmitted` event holds StartJobRun's answer
    (https://docs.aws.amazon.com/step-functions/latest/apireference/API_TaskSubmittedEventDetails.html), and
    GetJobRun finds that run running. It asks the run to stop and waits for its end: two runs never overlap.
    Nothing is listed."""
    monkeypatch.setattr(scenario_module, "SPARK_RUN_S", 600.0)
    [emr] = [declared for declared in CATALOG["job_types"] if declared["name"] == EMR_TYPE]
    scenario = parse_scenario(
        {
            "seed": 2,
            "job_types": [emr],
            "jobs": [{"id": "e1", "type": EMR_TYPE, "params": {}}],
            "faults": [{"type": "abort_execution", "job": "e1", "at_s": 20}],
        }
    )
    result = run_scenario(scenario)

    assert result.result.violation is None
    assert result.jobs["e1"].executions == ["ABORTED", "SUCCEEDED"]
    histories = [call for call in calls(result, "stepfunctions.get_execution_history") if call["actor"] == "receiver"]
    assert histories, "the retry read the stopped execution's history"
    submitted = [
        json.loads(event["taskSubmittedEventDetails"]["output"])
        for event in histories[0]["answer"]["events"]
        if event["type"] == "TaskSubmitted"
    ]
    assert submitted == [{"ApplicationId": "sim", "JobRunId": "00r0000", "Arn": submitted[0]["Arn"]}]
    read = calls(result, "emr-serverless.get_job_run")
    assert read and read[0]["params"] == {"applicationId": "sim", "jobRunId": "00r0000"}
    assert read[0]["answer"]["jobRun"]["state"] == "RUNNING"
    assert result.result.coverage["emr:cancelled_by_the_processor"] >= 1
    assert not calls(result, "emr-serverless.list_job_runs")


def test_emr_serverless_listing_of_many_live_runs_misses_one_that_reading_its_id_finds() -> None:
    """The backfill's slip, small: 120 live runs of one application, the ten newest ending while a reader
    pages through ListJobRuns in the live states. The sim's listing pages by position, so the runs that
    left move the others forward, and the run 56th from the newest moves into the page already read. (AWS
    groups a listing of several states by state, so a run changing state between pages can slip there
    too: https://docs.aws.amazon.com/emr-serverless/latest/APIReference/API_ListJobRuns.html.) Read by the
    id its execution's history holds, the run is found running and asked to stop."""
    listing = ManyRuns()
    listed: list[str] = []
    page: dict[str, Any] = {"applicationId": EMR_APPLICATION, "states": list(EMR_LIVE)}
    while True:
        answer = listing.list_job_runs(**page)
        listed += [run["name"] for run in answer["jobRuns"]]
        if "nextToken" not in answer:
            break
        page["nextToken"] = answer["nextToken"]
    assert listing.target.state == "RUNNING" and listing.target.name not in listed, "the listing missed a live run"

    asked = ManyRuns()  # the same runs again, asked about by the receiver's code
    job_runs = JobRuns({"spark": RunPlace("emr_serverless", name=EMR_APPLICATION)}, lambda _: asked, asked.sfn)
    now = asked.scheduler.now()
    assert job_runs.running("spark", asked.sfn.arn_of(asked.target.name), since=0.0, ended_at=now, now=now)
    assert asked.target.state == "CANCELLING", "read by its id, found running and asked to stop"


class ManyRuns:
    """120 runs of one application, each of an execution whose history holds its start's answer, all
    RUNNING; the ten newest end while a listing of them is read (each page read lets 1,000 s pass). The
    execution of the run 56th from the newest (`target`) is stopped, its run left running."""

    def __init__(self) -> None:
        app = Application(200, 3_600.0)
        self.scheduler, self.emr = app.scheduler, app.emr
        aws = FakeAws(
            VirtualClock(app.scheduler),
            random.Random(1),
            table=table_definition("leases"),
            state_machine_arn=STATE_MACHINE_ARN,
        )
        self.sfn = aws.stepfunctions
        for index in range(120):
            name = f"m-{index:03d}-1"
            execution = self.sfn.executions[
                self.sfn.start_execution(stateMachineArn=STATE_MACHINE_ARN, name=name)["executionArn"]
            ]
            app.submit(
                name, 600 if index >= 110 else 36_000, at=float(index), submitted=_submitted(self.sfn, execution)
            )
        app.run(until=200.0)
        assert all(run.state == "RUNNING" for run in self.emr.runs.values())
        [self.target] = [run for run in self.emr.runs.values() if run.name == "m-064-1"]  # 65th of 120 submitted
        self.sfn.stop_execution(executionArn=self.sfn.arn_of(self.target.name))

    def list_job_runs(self, **request: Any) -> dict[str, Any]:
        answer = self.emr.list_job_runs(**request)
        self.scheduler.run(until=self.scheduler.now() + 1_000)  # the newest runs end meanwhile
        return answer

    def get_job_run(self, **request: Any) -> dict[str, Any]:
        return self.emr.get_job_run(**request)

    def cancel_job_run(self, **request: Any) -> dict[str, Any]:
        return self.emr.cancel_job_run(**request)


def _submitted(sfn: FakeStepFunctions, execution: Execution) -> Callable[[dict[str, Any]], None]:
    """Records a start's answer in the execution's history, as the workflow's EMR Serverless task does."""
    task = {"resourceType": EMR_TASK[0], "resource": EMR_TASK[1]}
    sfn.record(execution, "TaskScheduled", **task)

    def record(answer: dict[str, Any]) -> None:
        sfn.record(execution, "TaskSubmitted", **task, output=json.dumps(answer))

    return record
