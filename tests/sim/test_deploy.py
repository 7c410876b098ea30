"""Deploys inside the simulation (`longjobs.sim.deployer`): a change of what the receiver accepts, or of a job's
attempts, while jobs run, wait and retry; a job type added, with a new workflow definition for new starts while
old executions run on theirs; and the property that a DLQ copy keeps its attempts.

Step Functions runs an execution on the definition it started with: "executions that are already running
continue to use the previous version" of an updated state machine (UpdateStateMachine, Step Functions API
reference: https://docs.aws.amazon.com/step-functions/latest/apireference/API_UpdateStateMachine.html)."""

from __future__ import annotations

import io
import json

import pytest

from longjobs.engine.lease.schema import HISTORY_ATTR, STATUS_ATTR
from longjobs.sim.campaign import run_seed
from longjobs.sim.executions import Executions
from longjobs.sim.properties import Monitor, PropertyViolation
from longjobs.sim.workflow import Interpreter
from longjobs.sim.workload import ADDED_TYPE, DEPLOY_CHANGES, draw

REFUSED_AS = {"stricter_schema": "InvalidParameters", "type_removed": "UnknownJobType", "smaller_bodies": "TooLarge"}
"""The DLQ reason of a body the deploy makes this receiver refuse."""


def _seeds_deploying(change: str, count: int) -> list[int]:
    seeds = (seed for seed in range(3_000) if (plan := draw(seed).deploy) is not None and plan.change == change)
    return [next(seeds) for _ in range(count)]


def _dead_letter_reasons(seed: int) -> list[str]:
    result = run_seed(seed)
    assert result.violation is None, (seed, result.violation)
    assert result.coverage[f"sim:deployed:{draw(seed).deploy.change}"] == 1  # type: ignore[union-attr]
    out = io.StringIO()
    result.trace.write(out)
    events = [json.loads(line) for line in out.getvalue().splitlines()]
    return [str(e["reason"].get("ErrorType")) for e in events if e.get("event") == "dead_lettered"]


@pytest.mark.parametrize("change", DEPLOY_CHANGES)
def test_deploy_of_each_change_holds_every_property(change: str) -> None:
    """Each change, deployed while jobs run: every property holds, and some seed's messages meet it (a body
    the new receiver refuses goes to the DLQ with its reason, and with the attempts it had before)."""
    reasons = [reason for seed in _seeds_deploying(change, 4) for reason in _dead_letter_reasons(seed)]
    if change in REFUSED_AS:
        assert REFUSED_AS[change] in reasons, reasons
    else:
        assert "AttemptsExhausted" in reasons, reasons


def test_deploys_are_drawn_on_their_own_stream_and_fit_the_seed() -> None:
    """A change needs jobs it acts on: a stricter schema of the limited type, the EMR type removed."""
    for seed in range(200):
        workload = draw(seed)
        plan = workload.deploy
        if plan is None:
            continue
        types = {job.type for job in workload.jobs}
        needs = {"stricter_schema": "limited", "type_removed": "spark-emr", "smaller_bodies": "spark"}
        assert needs.get(plan.change) in types | {None}


def test_dlq_keeps_history_counts_the_attempts_a_copy_left_out() -> None:
    """A DLQ copy's `Attempts` may leave the oldest out (`{"omitted": n}`, SQS's size): they still count."""
    history = {HISTORY_ATTR: {"S": json.dumps([{"execution": f"e{n}"} for n in range(3)])}}
    lease = {"d1": {**history, STATUS_ATTR: {"S": "DEAD_LETTERING"}, "claimed_by": {"S": "the receive sending it"}}}
    lease |= {"d2": lease["d1"], "m1": lease["d1"]}  # the table, by the message each copy names
    monitor = Monitor(limits={})
    monitor.started.update({"e0", "e1", "e2"})
    reason = {"ErrorType": {"StringValue": "InvalidParameters"}}
    kept = json.dumps([{"omitted": 2}, {"execution": "e2"}])
    monitor.dead_lettered_copy("j", {**reason, "Attempts": {"StringValue": kept}}, "d1", lease)
    with pytest.raises(PropertyViolation, match=r"dlq_keeps_history: .* carries 0 attempt\(s\); its lease records 3"):
        monitor.dead_lettered_copy("j", reason, "d2", lease)
    monitor.dead_lettered_copy("j", {}, "m1", lease)  # SQS's redrive moved the message itself: no reason, no copy


def _events(result: object) -> list[dict[str, object]]:
    out = io.StringIO()
    result.trace.write(out)  # type: ignore[attr-defined]
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _added_jobs(seed: int) -> set[str]:
    return {job.job_id for job in draw(seed).jobs if job.type == ADDED_TYPE}


def test_deploy_of_a_type_runs_old_executions_on_their_definition_and_new_ones_on_the_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seed 0 adds a type 2,500 s in: the executions started before run on the definition they started with,
    those started after on the new one, and the new type's jobs succeed."""
    ran_on: dict[str, tuple[float, Interpreter]] = {}
    deployed: dict[str, object] = {}
    execute, deploy_definition = Executions._execute, Executions.deploy_definition

    def recording(self: Executions, execution: object, interpreter: Interpreter) -> None:
        ran_on[execution.name] = (execution.started, interpreter)  # type: ignore[attr-defined]
        execute(self, execution, interpreter)  # type: ignore[arg-type]

    def noting(self: Executions, definition: dict[str, object]) -> None:
        deployed["before"] = self.interpreter
        deploy_definition(self, definition)
        deployed["after"], deployed["at"] = self.interpreter, self.scheduler.now()

    monkeypatch.setattr(Executions, "_execute", recording)
    monkeypatch.setattr(Executions, "deploy_definition", noting)
    result = run_seed(0)
    assert result.violation is None
    assert result.coverage["sim:deployed:type_added"] == 1
    at = float(deployed["at"])  # type: ignore[arg-type]
    before = [interpreter for started, interpreter in ran_on.values() if started < at]
    after = [interpreter for started, interpreter in ran_on.values() if started >= at]
    assert before and all(interpreter is deployed["before"] for interpreter in before)
    assert after and all(interpreter is deployed["after"] for interpreter in after)
    succeeded = {e["job_id"] for e in _events(result) if e.get("event") == "job_ended" and e.get("succeeded")}
    assert _added_jobs(0) <= succeeded


def test_deploy_of_a_type_without_its_definition_fails_its_jobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same seed with the catalog deployed but not the definition: the new type's executions find no
    branch for it (`UnknownJobType`), so the definition's deploy is what runs them."""
    monkeypatch.setattr(Executions, "deploy_definition", lambda self, definition: None)
    result = run_seed(0)
    assert result.coverage["workflow:end:FAILED:UnknownJobType"] > 0
    succeeded = {e["job_id"] for e in _events(result) if e.get("event") == "job_ended" and e.get("succeeded")}
    assert not _added_jobs(0) & succeeded


def test_deploy_of_a_type_is_drawn_on_its_own_stream_with_its_jobs_sent_after_it() -> None:
    for seed in range(200):
        workload = draw(seed)
        plan, added = workload.definition_deploy, [job for job in workload.jobs if job.type == ADDED_TYPE]
        if plan is None:
            assert not added
            continue
        assert plan.change == "type_added" and not workload.fifo
        assert added and all(job.send_at_s > plan.at_s for job in added)


def test_deploy_type_added_after_a_change_of_the_catalog_keeps_that_change() -> None:
    """Two deploys in one seed, a limit added and then a type: the functions run on a catalog with both, as
    a stack deployed twice does. A second deploy that forgot the limit would run the type's jobs without
    slots while the properties hold its limit (type_concurrency)."""
    from longjobs.sim.campaign import FAULT_WINDOW_S, deployed_workflow
    from longjobs.sim.faults import FaultPlan
    from longjobs.sim.workload import ADDED_LIMIT, CATALOG_JSON, EMR_TYPE
    from longjobs.sim.world import START, World

    def both(seed: int) -> bool:
        workload = draw(seed, "standard")
        first, second = workload.deploy, workload.definition_deploy
        return first is not None and second is not None and first.change == "limit_added" and first.at_s < second.at_s

    seed = next(seed for seed in range(1_000) if both(seed))
    workflow = deployed_workflow()
    world = World(
        seed,
        draw(seed, "standard"),
        workflow.definition,
        CATALOG_JSON,
        faults=FaultPlan.draw(seed, start=START, quiet_after_s=FAULT_WINDOW_S),
        execution_timeout_s=workflow.timeout_s,
        keep_calls=False,
    )
    result = world.run()
    assert result.violation is None, (seed, result.violation)
    assert result.coverage["sim:deployed:limit_added"] == result.coverage["sim:deployed:type_added"] == 1
    catalog = world.functions.catalog
    assert catalog.limit(EMR_TYPE) == ADDED_LIMIT, "the second deploy keeps the first one's limit"
    assert catalog.get(ADDED_TYPE) is not None
