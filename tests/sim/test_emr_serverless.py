"""EMR Serverless runs in the simulation (`longjobs.sim.emr`): what a stop does to a run, the idempotent
start, and the checks that a weakened step is caught. The semantics and their AWS pages are in the
model's docstring; moto has no EMR Serverless, so these are the simulation's tests only."""

from __future__ import annotations

import json
from typing import Any

import pytest

from longjobs.offline.scenario import parse_scenario
from longjobs.sim.campaign import deployed_workflow, run_seed
from longjobs.sim.scenario import ScenarioRun, run_scenario
from longjobs.sim.workload import CATALOG, EMR_TYPE

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
        ({"ClientToken.$": "States.Format('{}-{}', $$.Execution.Name, $$.State.RetryCount)"}, "emr_runs_end"),
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
