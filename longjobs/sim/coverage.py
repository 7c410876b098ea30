"""The `sometimes` side: what a campaign should reach at least once, and which of it it never did.

Targets: every receiver outcome a standard queue can produce, the reasons it sends to the DLQ for, every
extender path, every Catch of the workflow as deployed (read from the definition, so a new Catch is a new
target), the 12 h cap, a stale writer refused by its condition (fencing), a refused start given back and
received again, each path of an EMR Serverless run, the operator's cancels and redrives, each change a deploy
makes, and every fault kind on every operation the code was seen to call (crashes only on the functions'
calls). A FIFO profile is not held to what FIFO cannot reach.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from longjobs.history.faults import CallFault
from longjobs.sim.faults import CRASHING_ACTORS
from longjobs.sim.workload import DEPLOY_CHANGES

RECEIVER_OUTCOMES = {
    "standard": (
        "rejected",
        "inline_done",
        "already_succeeded",
        "started",
        "running",
        "settled",
        "not_started",
        "stale",
        "waiting",
        "fanned_out",
    ),
    "admission": ("started", "waiting_for_slot", "parked", "duplicate", "rejected"),
}
DLQ_REASONS = ("AttemptsExhausted", "InvalidParameters", "TooLarge")
"""Why the receiver sent a message to the DLQ (its copy's `ErrorType`), on the profiles of standard jobs: its
outcome is `rejected` whatever the reason, so each path to the DLQ is a target of its own."""
EXTENDER_PATHS = (
    "renewed",
    "capped",
    "lost",
    "stopped",
    "throttled",
    "conflicts",
    "checked",
    "released",
    "listed",
    "completed",
)
"""`completed` is reconciliation finding an execution SUCCEEDED while the lease naming it is still ACTIVE:
the workflow's close and its delete failed for good (an outage of both, `longjobs.sim.faults.OUTAGES`), and
the execution succeeded all the same."""
OTHER = (
    "fenced:extender:transact_write_items",
    "fenced:workflow:update_item",
    "job_started",
    "sim:shards_upgraded",
    "sim:shards:8->1",
    "sim:shards:1->4",
    "sim:shards:4->2",
    "extender:overlapping_run",
    "refused_start:released",
    "refused_start:every_attempt",
    "refused_start:landed_kept",
    "duplicate_delivery_late",
    "duplicate_delivery_same_batch",
    "refused_start:received_again",
    "extender:stop_at_cap",
    "needless_redelivery:delete_tried",
    "needless_redelivery:handling_died",
)
EMR_SERVERLESS = (
    "emr:run:SUCCESS",
    "emr:run:FAILED",
    "emr:run:CANCELLED",
    "emr:run_past_its_limit",
    "emr:cancelled_by_step_functions",
    "emr:cancel_lost",
    "emr:run_outlived_its_execution",
    "emr:start_answer_lost",
    "emr:start_found_its_run",
    "emr:stuck_queued",
    "emr:step_timed_out",
    "emr:cancelled_by_the_processor",
)
"""The EMR Serverless runs' paths (`longjobs.sim.emr`), on the profiles whose seeds run them."""
EMR_PROFILES = ("standard", "mixed")
OPERATOR = (
    "operator:cancel:cancelled",
    "operator:cancel:completed",
    "operator:cancel:already_succeeded",
    "operator:cut_after:update_item",
    "operator:cut_after:stop_execution",
    "operator:cut_after:send_message",
    "operator:cut_after:delete_message",
)
"""The operator's cancels (`longjobs.sim.operator`): each step it is cut short after, a cancel run again to
its end, and one that finds the job done; on the profiles whose seeds cancel."""
REDRIVES = (
    "operator:redrive:cli:copy",
    "operator:redrive:cli_all:move-task",
    "operator:redrive:cli_filtered:copy",
    "operator:redrive:console:move-task",
    "sqs:move_task:completed:moved",
    "sqs:move_task:failed:CouldNotDetermineMessageSource",
    "redriven:succeeded",
    "redriven:dead_lettered_again",
)
"""The operator's redrives of the DLQ: each way, a move task that ends each way, and redriven messages
that end each way; on the profiles whose seeds redrive."""
CALL_ONLY_FAULTS = tuple(kind for kind in CallFault if kind not in (CallFault.CRASH_BEFORE, CallFault.CRASH_AFTER))


def catch_targets(states: Mapping[str, Any]) -> Iterator[str]:
    for name, state in states.items():
        for catcher in state.get("Catch", []):
            yield f"workflow:catch:{name}->{catcher['Next']}"
        for branch in state.get("Branches", []):
            yield from catch_targets(branch["States"])


def targets(coverage: Counter[str], definition: Mapping[str, Any], profile: str) -> list[str]:
    names: list[str] = []
    for part, outcomes in RECEIVER_OUTCOMES.items():
        if profile in (part, "mixed"):
            names += [f"receiver:{outcome}" for outcome in outcomes]
    if profile in ("standard", "mixed"):
        names += [f"dlq:{reason}" for reason in DLQ_REASONS]
    names += [f"extender:{path}" for path in EXTENDER_PATHS]
    names += list(OTHER)
    if profile in EMR_PROFILES:
        names += list(EMR_SERVERLESS) + list(OPERATOR) + list(REDRIVES)
    if profile == "mixed":  # every change meets the jobs it acts on
        names += [f"sim:deployed:{change}" for change in DEPLOY_CHANGES]
        names += ["sim:deployed:type_added", "sim:definition:older_execution_ended"]
        # a limit removed while messages of the type are parked: the extender starts them
        names += ["admission:unparked_without_limit", "limit_added:waiting"]
    catches = sorted(catch_targets(definition["States"]))
    if profile == "fifo":  # a batch of one record, and no admission (`longjobs.engine.factory`): no slot held
        names.remove("duplicate_delivery_same_batch")
        catches = [name for name in catches if "Slot" not in name]
    names += catches
    called: dict[str, set[str]] = {}
    for key in coverage:
        if key.startswith("call:"):
            _, actor, operation = key.split(":", 2)
            called.setdefault(operation, set()).add(actor)
    for operation, actors in sorted(called.items()):
        kinds = CallFault if actors & CRASHING_ACTORS else CALL_ONLY_FAULTS
        names += [f"fault:{kind.value}:{operation}" for kind in kinds]
    return names


def never_reached(coverage: Counter[str], definition: Mapping[str, Any], profile: str) -> list[str]:
    return [name for name in targets(coverage, definition, profile) if not coverage.get(name)]
