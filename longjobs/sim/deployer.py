"""The deployer inside the simulation: a deploy of the stack while messages are in flight, changing what the
receiver accepts or a job's attempts (`longjobs.sim.workload.DEPLOY_CHANGES`). Invocations begun before it
finish with the functions they began with; the queues' redrive count follows the new settings
(`World.rebuild`). A type removed keeps the workflow's definition: its executions never start again (the
receiver refuses its messages). A type added (`type_added`) renders a new definition, with the type's
branch: executions started after the deploy run it, and those that run keep the definition they started
with, as Step Functions runs them."""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any

from longjobs.engine.jobs import JobCatalog, load_catalog
from longjobs.sim.workload import (
    CATALOG_ADDED_JSON,
    EMR_TYPE,
    LIMITED_TYPE,
    SMALLER_BODY_BYTES,
    SPARK_HEARTBEAT_S,
    STRICTER_MAX_SECONDS,
    DeployPlan,
)

if TYPE_CHECKING:
    from longjobs.sim.world import World


def deploy(world: World, plan: DeployPlan) -> None:
    """The stack deployed with `plan.change`: the functions rebuilt on it."""
    world.busy.discard(f"deploy:{plan.change}")
    world.monitor.reach(f"sim:deployed:{plan.change}")
    world.trace.event("world", "deployed", change=plan.change)
    functions = world.functions
    if plan.change == "stricter_schema":
        functions.catalog = _catalog_with(functions.catalog, LIMITED_TYPE, STRICTER_MAX_SECONDS)
    elif plan.change == "type_removed":
        kept = [job_type for job_type in functions.catalog if job_type.name != EMR_TYPE]
        functions.catalog = JobCatalog(kept, functions.catalog.s3_triggers)
    elif plan.change == "type_added":
        functions.catalog = load_catalog(json.loads(CATALOG_ADDED_JSON))
        world.executions.deploy_definition(rendered_definition(CATALOG_ADDED_JSON))
    elif plan.change == "smaller_bodies":
        world.deployed["max_body_bytes"] = SMALLER_BODY_BYTES
    else:
        world.deployed["max_attempts"] = 1
    world.rebuild()


@cache
def rendered_definition(catalog_json: str) -> dict[str, Any]:
    """The workflow's definition as the construct renders it for `catalog_json` (seconds: it loads the CDK;
    once per process and catalog)."""
    from longjobs.offline.resources import workflow_definition

    return dict(json.loads(workflow_definition(SPARK_HEARTBEAT_S, catalog_json, emr_serverless=True)))


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
