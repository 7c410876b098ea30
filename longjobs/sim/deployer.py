"""The deployer inside the simulation: a deploy of the stack while messages are in flight, changing what the
receiver accepts or a job's attempts (`longjobs.sim.workload.DEPLOY_CHANGES`). Invocations begun before it
finish with the functions they began with; the queues' redrive count follows the new settings
(`World.rebuild`).

- A limit removed keeps the type's waiting queue; the properties hold no limit for it from then on
  (`_remove_limit`). A limit added holds for the runs that take a slot (`_add_limit`).
- A type removed loses its waiting queue and keeps the workflow's definition: its executions never start
  again (the receiver refuses its messages).
- A type added (`type_added`) joins the catalog deployed then, with what an earlier deploy of the seed
  changed in it, and renders a new definition with the type's branch: executions started after the deploy
  run it, and those that run keep the definition they started with, as Step Functions runs them."""

from __future__ import annotations

import json
from functools import cache
from typing import Any, Protocol

from longjobs.engine.jobs import JobCatalog, load_catalog
from longjobs.engine.settings import LAMBDA_MAX_TIMEOUT_S
from longjobs.sim.aws import FakeQueue, Message
from longjobs.sim.executions import Executions
from longjobs.sim.lambdas import LambdaService
from longjobs.sim.stage import Stage
from longjobs.sim.workload import (
    ADDED_LIMIT,
    ADDED_TYPE,
    CATALOG_ADDED_JSON,
    EMR_TYPE,
    LIMITED_TYPE,
    SMALLER_BODY_BYTES,
    SPARK_HEARTBEAT_S,
    STRICTER_MAX_SECONDS,
    DeployPlan,
)


class DeployerStage(Stage, Protocol):
    """The world as a deploy changes it (`longjobs.sim.world.World`): the functions' settings and their
    rebuild, the waiting queues, and the workflow's definition."""

    deployed: dict[str, Any]
    waiting: dict[str, FakeQueue]
    job_queues: tuple[FakeQueue, ...]
    busy: set[str]
    functions: LambdaService
    executions: Executions

    def rebuild(self) -> None: ...


def deploy(world: DeployerStage, plan: DeployPlan) -> None:
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
        if EMR_TYPE in world.waiting:
            _remove_waiting_queue(world, EMR_TYPE)
    elif plan.change == "type_added":  # to the catalog deployed now: a change an earlier deploy made stays
        added = next(t for t in load_catalog(json.loads(CATALOG_ADDED_JSON)) if t.name == ADDED_TYPE)
        functions.catalog = JobCatalog([*functions.catalog, added], functions.catalog.s3_triggers)
        world.executions.deploy_definition(rendered_definition(CATALOG_ADDED_JSON))
    elif plan.change == "limit_removed":
        functions.catalog = _catalog_limit(functions.catalog, LIMITED_TYPE, None)
        _remove_limit(world, LIMITED_TYPE)
    elif plan.change == "limit_added":
        functions.catalog = _catalog_limit(functions.catalog, EMR_TYPE, ADDED_LIMIT)
        _add_limit(world, EMR_TYPE, ADDED_LIMIT)
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


def _remove_limit(world: DeployerStage, job_type: str) -> None:
    """`job_type`'s limit removed: its waiting queue stays (every type has one), and from now on no limit
    holds for the type, in the properties and in the trace the checker reads."""
    world.monitor.limits.pop(job_type, None)
    world.trace.event("world", "limits", limits=dict(sorted(world.monitor.limits.items())), excused_s=0)
    queue, on_receive = world.waiting[job_type], world.aws.sqs.on_receive
    assert on_receive is not None

    def received(source: FakeQueue, message: Message) -> None:
        if source is queue:  # what was parked before the deploy, received by the extender's pass
            world.monitor.reach("admission:unparked_without_limit")
        on_receive(source, message)

    world.aws.sqs.on_receive = received


def _add_limit(world: DeployerStage, job_type: str, limit: int) -> None:
    """`job_type` limited: from now on the limit holds for its runs that take a slot. Those that run now
    take none, nor those the replaced functions start while an invocation of theirs may still run (Lambda's
    longest timeout): they are excused, in the properties and in the checker."""
    types = world.monitor.types
    types.limit_added(job_type, limit)
    world.scheduler.call_at(world.scheduler.now() + LAMBDA_MAX_TIMEOUT_S, lambda: types.excusing.discard(job_type))
    limits = dict(sorted(world.monitor.limits.items()))
    world.trace.event("world", "limits", limits=limits, excused_s=LAMBDA_MAX_TIMEOUT_S)


def _remove_waiting_queue(world: DeployerStage, job_type: str) -> None:
    """`job_type` removed from the catalog: CloudFormation deletes its waiting queue ("any messages in the
    queue are no longer available", SQS's DeleteQueue); the type has no limit in the seed, so it is empty."""
    queue = world.waiting.pop(job_type)
    remaining = {name: q.url for name, q in world.waiting.items()}
    world.deployed["waiting_queues"] = json.dumps(remaining) if remaining else None
    world.aws.sqs.delete_queue(queue.url)
    world.job_queues = tuple(q for q in world.job_queues if q is not queue)


def _catalog_limit(catalog: JobCatalog, name: str, limit: int | None) -> JobCatalog:
    """`catalog` with type `name`'s `max_concurrency` set to `limit` (None: removed)."""
    types = [t.model_copy(update={"max_concurrency": limit}) if t.name == name else t for t in catalog]
    return JobCatalog(types, catalog.s3_triggers)


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
