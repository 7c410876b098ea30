"""The deployer inside the simulation: a deploy of the stack while messages are in flight, changing what the
receiver accepts or a job's attempts (`longjobs.sim.workload.DEPLOY_CHANGES`). Invocations begun before it
finish with the functions they began with; the queues' redrive count follows the new settings
(`World.rebuild`). The workflow's definition stays: a removed type's executions never start again (the
receiver refuses its messages), and those that run keep the definition they started with, as Step
Functions runs them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from longjobs.engine.jobs import JobCatalog
from longjobs.sim.workload import EMR_TYPE, LIMITED_TYPE, SMALLER_BODY_BYTES, STRICTER_MAX_SECONDS, DeployPlan

if TYPE_CHECKING:
    from longjobs.sim.world import World


def deploy(world: World, plan: DeployPlan) -> None:
    """The stack deployed with `plan.change`: the functions rebuilt on it."""
    world.busy.discard("deploy")
    world.monitor.reach(f"sim:deployed:{plan.change}")
    world.trace.event("world", "deployed", change=plan.change)
    functions = world.functions
    if plan.change == "stricter_schema":
        functions.catalog = _catalog_with(functions.catalog, LIMITED_TYPE, STRICTER_MAX_SECONDS)
    elif plan.change == "type_removed":
        kept = [job_type for job_type in functions.catalog if job_type.name != EMR_TYPE]
        functions.catalog = JobCatalog(kept, functions.catalog.s3_triggers)
    elif plan.change == "smaller_bodies":
        world.deployed["max_body_bytes"] = SMALLER_BODY_BYTES
    else:
        world.deployed["max_attempts"] = 1
    world.rebuild()


def _catalog_with(catalog: JobCatalog, name: str, max_seconds: int) -> JobCatalog:
    """`catalog` with type `name`'s `seconds` parameter at most `max_seconds` (a stricter schema)."""
    stricter = []
    for job_type in catalog:
        if job_type.name == name:
            schema = json.loads(json.dumps(job_type.params_schema))
            schema["properties"]["seconds"]["maximum"] = max_seconds
            job_type = job_type.model_copy(update={"params_schema": schema})
        stricter.append(job_type)
    return JobCatalog(stricter, catalog.s3_triggers)
