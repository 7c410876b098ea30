"""The ids the construct derives from a job type's name. The construct names each type's states and
resources with `state_prefix`, `glue_job_id` and `wait_prefix`; `generated_ids` lists every id it builds
from them (tests/infra/test_processor.py compares the list with the construct's own), so the catalog can
refuse two types whose ids would be the same, without importing CDK.

A type's ids are its name in CamelCase (`state_prefix`: `word-count` -> `WordCount`) with a fixed part
before or after. So two different names can give one id, and `cdk synth` would then stop with an error
that names no type ("There is already a Construct with name ..."):

- `a-b` and `a_b` give one prefix, `AB`;
- a prefix may begin or end with another type's fixed part: `x`'s state `RunXJob` is `run-x`'s Glue job
  `RunXJob`, and a wait type `nap`'s state `NapWaitSummary` is a pyspark type `nap-wait`'s.

Two scopes hold them: the workflow construct (every state of the state machine, each Glue job and its
assets) and the EMR Serverless runner (an application per type).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from longjobs.engine.jobs.types import JobType

WORKFLOW_SCOPE = "workflow"
"""The workflow construct (`longjobs.construct.job_workflow.JobWorkflow`): the states and the Glue jobs."""
EMR_SCOPE = "emr_serverless"
"""The EMR Serverless runner (`longjobs.construct.emr_serverless.EmrServerlessRunner`): the applications."""


def state_prefix(job_type: JobType) -> str:
    """The type's name as a state name part: `spark` -> `Spark`, `word-count` -> `WordCount`."""
    return "".join(part.capitalize() for part in re.split(r"[-_]", job_type.name) if part)


def glue_job_id(job_type: JobType) -> str:
    """The construct id of a Glue type's job. The built-in `spark` keeps `Job`: another id would change its
    logical id, and a deploy would replace the Glue job."""
    return "Job" if job_type.name == "spark" else f"{state_prefix(job_type)}Job"


def wait_prefix(job_type: JobType) -> str:
    """The prefix of a wait type's states: none for the built-in `wait` (`Wait`, `WaitThenFail`, ...),
    which keeps the state names it always had; the state prefix for the others."""
    return "" if job_type.name == "wait" else state_prefix(job_type)


def generated_ids(job_type: JobType) -> dict[str, tuple[str, ...]]:
    """Every id the construct gives the type's states and resources, by scope. The offline workflow's
    pyspark step (`Run<Prefix>Job` alone) uses a part of the cloud's; an inline type has none."""
    prefix = state_prefix(job_type)
    if job_type.runner == "pyspark":
        # The run, then the read of its summary (`read_run_summary`), on either platform.
        states = (f"Run{prefix}Job", f"Read{prefix}Summary", f"{prefix}RunOutcome", f"{prefix}Summary")
        if job_type.platform == "emr_serverless":
            created = () if job_type.emr.application_arn is not None else (f"{prefix}Application",)
            return {WORKFLOW_SCOPE: (*states, f"{prefix}EmrEntry"), EMR_SCOPE: created}
        job = glue_job_id(job_type)
        wheels = (f"{job}Wheels", f"{job}WheelsCopy") if job_type.requirements else ()
        return {WORKFLOW_SCOPE: (*states, job, f"{job}Entry", *wheels)}
    if job_type.runner == "wait":
        wait = wait_prefix(job_type)
        return {WORKFLOW_SCOPE: (f"{wait}WaitThenFail", f"{wait}WaitJobFailed", f"{wait}Wait", f"{wait}WaitSummary")}
    if job_type.runner == "state_machine":
        return {WORKFLOW_SCOPE: (f"{prefix}StateMachineRef", f"Run{prefix}StateMachine")}
    return {}


@dataclass(frozen=True)
class Collision:
    """Two types that would give one id in one scope: `first` is the one declared earlier."""

    first: str
    second: str
    scope: str
    id: str


def collisions(job_types: Iterable[JobType]) -> list[Collision]:
    """Each pair of `job_types` whose ids meet, once per pair (the first id found), in their order."""
    owners: dict[tuple[str, str], str] = {}
    found: dict[tuple[str, str], Collision] = {}
    for job_type in job_types:
        for scope, ids in generated_ids(job_type).items():
            for construct_id in ids:
                owner = owners.setdefault((scope, construct_id), job_type.name)
                if owner != job_type.name and (owner, job_type.name) not in found:
                    found[(owner, job_type.name)] = Collision(owner, job_type.name, scope, construct_id)
    return list(found.values())
