"""The operator inside the simulation: `longjobs cancel` of a job's message while it runs, and a redrive
of the DLQ.

A cancel is the engine's own (`longjobs.engine.cancel.cancel`) on the operator's clients, cut short at
one of its steps now and then and run again later, or never (the extender then finishes it after its
hand-over).

A cut is a crash right after the cancel's first call of that operation (`CANCEL_CUTS`): the mark, the
stop, the DLQ copy's send, or the message's delete. The operator's calls see the seed's faults as the
functions' do; an error it cannot get past ends its run as it ends the command's. What the cancel did is
coverage (`operator:*`), and the property `cancelled_never_succeeds` holds each seed to the promise.

A redrive is the command's own (`longjobs.cli.dlq.redrive`: everything by SQS's move task, or a selection
by its copy loop) or the console's move task to the messages' source queues, which fails at the first
message the receiver sent to the DLQ itself (SQS cannot tell its source). Every message moved is a new
message of its job; the property `redriven_settles` holds each to an end: its job succeeds, or it is
back in the DLQ with a reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Protocol

from longjobs.cli.dlq import RedriveFilter, redrive
from longjobs.engine.cancel import Canceller, CancelRaced, UnknownId, cancel, operator_store
from longjobs.engine.delivery.dlq import EXHAUSTED
from longjobs.engine.factory import Clients
from longjobs.history.faults import CallFault
from longjobs.sim.aws import FakeQueue, Message
from longjobs.sim.aws.move_tasks import MoveTask
from longjobs.sim.faults import CallRule
from longjobs.sim.scheduler import Crash, Group
from longjobs.sim.stage import Stage
from longjobs.sim.workload import CancelPlan, RedrivePlan


class OperatorStage(Stage, Protocol):
    """The world as the operator sees it (`longjobs.sim.world.World`): the DLQ, the job queues, which job
    a message carries, and what must end before the seed may."""

    dlq: FakeQueue
    job_queues: tuple[FakeQueue, ...]
    busy: set[str]

    def job_of(self, message: Message) -> str: ...

    def keys_of(self, message: Message) -> tuple[str, ...]: ...


REASON = "cancelled by the simulation's operator"
CONSOLE_LOOK_S = 60.0
"""How long after starting a move task the operator looks at it."""
REDRIVE_GROUP = "operator:redrive"
"""The scheduler group of the operator's redrive: what it sends to a jobs queue is a redriven message."""


def schedule(world: OperatorStage) -> None:
    """Each of the workload's cancels, at its time."""
    start = world.scheduler.now()
    for plan in world.workload.cancels:
        world.scheduler.call_at(start + plan.at_s, _later(world, plan, plan.cut_after))
    for redrive_plan in world.workload.redrives:
        world.busy.add(f"redrive@{redrive_plan.at_s}")  # the seed does not end before it
        world.scheduler.call_at(start + redrive_plan.at_s, _redrive_later(world, redrive_plan))


SELECT = {
    "cli": RedriveFilter(),
    "cli_all": RedriveFilter(include_poison=True),
    "cli_filtered": RedriveFilter(error_types=frozenset({EXHAUSTED})),
}
"""What each of the command's redrives selects (`longjobs dlq redrive`, `--include-poison`, `--error-type`)."""


def _look(world: OperatorStage, sqs: Any) -> str | None:
    """The newest move task of the DLQ, a minute on: its failure reason, if it failed."""
    world.scheduler.sleep(CONSOLE_LOOK_S)
    results = sqs.list_message_move_tasks(SourceArn=world.dlq.arn)["Results"]
    return results[0].get("FailureReason") if results else None


def _redrive_later(world: OperatorStage, plan: RedrivePlan) -> Callable[[], None]:
    return lambda: world.scheduler.spawn(lambda: _redrive(world, plan), group=Group(REDRIVE_GROUP))


def _redrive(world: OperatorStage, plan: RedrivePlan) -> None:
    """The DLQ redriven by `plan.method`. A minute after a move task starts the operator looks at it
    (`ListMessageMoveTasks`), and redrives with the command (`--include-poison`) when the console's
    failed because SQS could not tell a message's source."""
    sqs = world.client("sqs", "operator")
    world.trace.event("operator", "redrive", method=plan.method)
    try:
        if plan.method == "console":
            sqs.start_message_move_task(SourceArn=world.dlq.arn)
            world.monitor.reach("operator:redrive:console:move-task")
            if _look(world, sqs) != "CouldNotDetermineMessageSource":
                return
            world.trace.event("operator", "redrive", method="cli_all", after="console")
        method = "cli_all" if plan.method == "console" else plan.method
        clock, sleep = world.clock.now, world.scheduler.sleep
        result = redrive(sqs, world.dlq.url, world.queue.url, clock=clock, sleep=sleep, select=SELECT[method])
        world.monitor.reach(f"operator:redrive:{method}:{result.method}")
        world.trace.event("operator", "redrove", method=result.method, moved=result.moved, failed=result.failed)
        if result.method == "move-task":
            _look(world, sqs)
    except Exception as exc:  # an AWS error the command would print
        world.monitor.reach("operator:redrive_failed")
        world.trace.event("operator", "redrive_failed", error=type(exc).__name__)
    finally:
        world.busy.discard(f"redrive@{plan.at_s}")  # a move task it started is busy on its own


def _later(world: OperatorStage, plan: CancelPlan, cut_after: str | None) -> Callable[[], None]:
    return lambda: _spawn(world, plan, cut_after)


def _spawn(world: OperatorStage, plan: CancelPlan, cut_after: str | None) -> None:
    world.scheduler.spawn(lambda: _cancel(world, plan, cut_after), group=Group(f"operator:{plan.job_id}"))


def _cancel(world: OperatorStage, plan: CancelPlan, cut_after: str | None) -> None:
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
        store=operator_store(clients.dynamodb, world.settings.table_name or ""),  # as `longjobs cancel` builds it
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


def run_move_task(world: OperatorStage, task: MoveTask) -> None:
    """SQS runs a message move task: one message at a time, at the task's rate; the seed waits for it."""
    world.busy.add(task.handle)

    def run() -> None:
        while world.aws.sqs.move_one(task):
            world.scheduler.sleep(1 / task.rate)
        world.monitor.reach(f"sqs:move_task:{task.status.lower()}:{task.failure or 'moved'}")
        world.trace.event("sqs", "move_task_ended", status=task.status, moved=task.moved, failure=task.failure)
        world.busy.discard(task.handle)

    world.scheduler.spawn(run, group=Group(f"sqs:{task.handle}"))


def moved(world: OperatorStage, queue: FakeQueue, message: Message, source: Message) -> None:
    """A move task put `source`, a DLQ message, on `queue` as `message`."""
    if queue in world.job_queues:
        redriven(world, message, source)


def redriven(world: OperatorStage, message: Message, source: Message) -> None:
    """A message of the DLQ (`source`) is back on a jobs queue as a new message (the operator's redrive): a
    message of the producer's job that `source` carries."""
    world.job_of_message[message.message_id] = world.job_of(source)
    for key in world.keys_of(source):
        world.monitor.redriven(key, message.message_id, message.group_id)
        world.trace.event(
            "operator", "redriven", message_id=message.message_id, job_id=key, moved_from=source.message_id
        )
