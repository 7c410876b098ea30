"""The operator inside the simulation: `longjobs cancel` of a job's message while it runs, the engine's
own cancel (`longjobs.engine.cancel.cancel`) on the operator's clients, cut short at one of its steps
now and then and run again later, or never (the extender then finishes it after its hand-over).

A cut is a crash right after the cancel's first call of that operation (`CANCEL_CUTS`): the mark, the
stop, the DLQ copy's send, or the message's delete. The operator's calls see the seed's faults as the
functions' do; an error it cannot get past ends its run as it ends the command's. What the cancel did is
coverage (`operator:*`), and the property `cancelled_never_succeeds` holds each seed to the promise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from longjobs.engine.cancel import Canceller, CancelRaced, UnknownId, cancel
from longjobs.engine.factory import Clients, Factory
from longjobs.sim.faults import CallFault, CallRule
from longjobs.sim.scheduler import Crash, Group

if TYPE_CHECKING:
    from longjobs.sim.workload import CancelPlan
    from longjobs.sim.world import World

REASON = "cancelled by the simulation's operator"


def schedule(world: World) -> None:
    """Each of the workload's cancels, at its time."""
    start = world.scheduler.now()
    for plan in world.workload.cancels:
        world.scheduler.call_at(start + plan.at_s, _later(world, plan, plan.cut_after))


def _later(world: World, plan: CancelPlan, cut_after: str | None) -> Callable[[], None]:
    return lambda: _spawn(world, plan, cut_after)


def _spawn(world: World, plan: CancelPlan, cut_after: str | None) -> None:
    world.scheduler.spawn(lambda: _cancel(world, plan, cut_after), group=Group(f"operator:{plan.job_id}"))


def _cancel(world: World, plan: CancelPlan, cut_after: str | None) -> None:
    message_id = next((mid for mid, job in world.job_of_message.items() if job == plan.job_id), None)
    if message_id is None:
        world.monitor.reach("operator:no_message_yet")
        return
    if cut_after is not None:
        world.faults.rules.append(
            CallRule(CallFault.CRASH_AFTER, frozenset({"operator"}), cut_after, 1.0, 1, world.scheduler.now(), math.inf)
        )
    clients = Clients(
        world.client("sqs", "operator"), world.client("dynamodb", "operator"), world.client("stepfunctions", "operator")
    )
    canceller = Canceller(
        store=Factory(world.settings, world.clock).store(clients),
        sqs=clients.sqs,
        stepfunctions=world.client("stepfunctions", "operator"),
        dlq_url=world.dlq.url,
        clock=world.clock,
    )
    world.trace.event("operator", "cancel", job_id=plan.job_id, message_id=message_id, cut_after=cut_after)
    try:
        report: Any = cancel(canceller, message_id, REASON)
    except Crash:
        world.monitor.reach(f"operator:cut_after:{cut_after}")
        world.trace.event("operator", "cancel_cut_short", job_id=plan.job_id, after=cut_after)
        if plan.again_after_s is not None:
            again = world.scheduler.now() + plan.again_after_s
            world.scheduler.call_at(again, _later(world, plan, None))
        return
    except (UnknownId, CancelRaced) as exc:
        world.monitor.reach(f"operator:refused:{type(exc).__name__}")
        return
    except Exception as exc:  # an AWS error the command would print: the cancel stays unfinished
        world.monitor.reach("operator:failed")
        world.trace.event("operator", "cancel_failed", job_id=plan.job_id, error=type(exc).__name__)
        return
    world.monitor.reach(f"operator:cancel:{report.outcome}")
    world.trace.event("operator", "cancelled", job_id=plan.job_id, outcome=str(report.outcome))
