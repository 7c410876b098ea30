"""FIFO queues in the simulation, on virtual time: order within a message group, groups side by side, a
group blocked while one of its messages is in flight (its head running, redelivered, held for its job id
or hidden for its release delay), a poison message and a failed head taken alone to the FIFO DLQ, after
which the group goes on.

These once ran on moto with threads and a 2 s queue visibility timeout (tests/functional/test_fifo.py),
and failed when the machine was busy. Here the stack's FIFO batch of one message is received by the
simulation's event source mapping, every step is on the virtual clock, and `fifo_order` (a job starts
only once every job sent before it in its group succeeded or is in the DLQ) is checked at every start.
What needs moto's wiring (the handler's batch of several messages of one group, the queues' attributes,
the CLI) stays in tests/functional/test_fifo.py."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from longjobs.engine.lease import Lease, LeaseStatus, LeaseStore
from longjobs.sim.campaign import deployed_workflow
from longjobs.sim.faults import FaultPlan
from longjobs.sim.workload import CATALOG_JSON, JobPlan, Workload
from longjobs.sim.world import TABLE, SeedResult, World
from tests.short_settings import SHORT_THRESHOLD


@dataclass
class Run:
    """A world run to its end, and what its trace says of each job."""

    world: World
    result: SeedResult
    delivered: dict[str, list[float]] = field(default_factory=dict)  # job -> its receives (virtual seconds)
    receives: dict[str, list[float]] = field(default_factory=dict)  # message id -> its receives
    started: dict[str, list[float]] = field(default_factory=dict)  # job -> starts of its job step
    ended: dict[str, list[tuple[float, bool]]] = field(default_factory=dict)  # job -> (end, succeeded)
    outcomes: dict[str, list[str]] = field(default_factory=dict)  # job -> the receiver's outcomes

    def message(self, job: str, index: int = 0) -> str:
        """The message id of the job's message (its `index`th, in send order)."""
        return [m for m, j in self.world.job_of_message.items() if j == job][index]

    def lease(self, job: str, index: int = 0) -> Lease | None:
        return lease_of(self.world, self.message(job, index))

    def dead_letters(self) -> list[dict[str, Any]]:
        """The FIFO DLQ's messages: body, group, deduplication id and reason."""
        dedup = {message_id: key for key, (_, message_id) in self.world.dlq.deduplicated.items()}
        return [
            {
                "body": m.body,
                "group": m.group_id,
                "dedup_id": dedup.get(m.message_id),
                **{name: value["StringValue"] for name, value in m.attributes.items()},
            }
            for m in sorted(self.world.dlq.messages.values(), key=lambda m: m.sequence)
        ]

    def executions(self, job: str) -> list[str]:
        return [e.status for e in self.world.aws.stepfunctions.executions.values() if e.input["job"]["job_id"] == job]


def lease_of(world: World, message_id: str) -> Lease | None:
    settings = world.settings
    store = LeaseStore(world.aws.dynamodb, TABLE, shards=settings.shards, closed_ttl_s=settings.closed_ttl_s)
    return store.get(message_id)


def wait(job: str, group: str, seconds: int, **params: Any) -> JobPlan:
    return JobPlan(job, "wait", {"seconds": seconds, **params}, 0.0, group=group)


def run(
    jobs: Sequence[JobPlan],
    settings: dict[str, Any] | None = None,
    actions: Sequence[tuple[float, Callable[[World], None]]] = (),
) -> Run:
    """Send `jobs` in their order (a millisecond apart) to a FIFO stack and run until all is settled."""
    plans = [
        JobPlan(j.job_id, j.type, j.params, i * 0.001, raw_body=j.raw_body, group=j.group) for i, j in enumerate(jobs)
    ]
    workflow = deployed_workflow()
    workload = Workload(plans, fifo=True, settings={**SHORT_THRESHOLD, **(settings or {})})
    faults = FaultPlan.scenario(rules=[], world={}, within_design=True, seed=1)
    world = World(
        1,
        workload,
        workflow.definition,
        CATALOG_JSON,
        faults=faults,
        execution_timeout_s=workflow.timeout_s,
        actions=actions,
        until_s=workload.settle_bound_s,
    )
    made = Run(world, world.run())
    for line in made.result.trace.records if made.result.trace else []:
        record = json.loads(line)
        job, event, t = str(record.get("job_id")), record.get("event"), record["t"]
        if event == "delivered" and record["queue"] == world.queue.name:
            made.delivered.setdefault(job, []).append(t)
            made.receives.setdefault(record["message_id"], []).append(t)
        elif event == "job_started":
            made.started.setdefault(job, []).append(t)
        elif event == "job_ended":
            made.ended.setdefault(job, []).append((t, record["succeeded"]))
        elif event == "outcome":
            made.outcomes.setdefault(job, []).append(record["outcome"])
    return made


def test_fifo_group_runs_its_jobs_one_after_the_other_while_other_groups_go_on() -> None:
    """A long head blocks its group: the jobs behind it are not even received until it has run, while
    the other group's jobs (an inline one, a long one) run beside it."""
    made = run(
        [
            wait("a1", "A", 30),
            wait("a2", "A", 1),
            JobPlan("b1", "echo", {"text": "inline"}, 0.0, group="B"),
            wait("a3", "A", 2),
            wait("b2", "B", 3),
        ]
    )

    assert made.result.violation is None, "fifo_order is checked at every job's start"
    ends = {job: ended[-1][0] for job, ended in made.ended.items()}
    for earlier, later in (("a1", "a2"), ("a2", "a3")):
        assert made.delivered[later] == [made.delivered[later][0]], f"{later} received once: never while blocked"
        assert made.delivered[later][0] >= ends[earlier], f"{later} received only once {earlier} has run"
        assert made.started[later][0] >= ends[earlier]
    assert made.started["b2"][0] < ends["a1"], "group B did not wait for group A"
    assert made.outcomes["b1"] == ["inline_done"] and made.lease("b1") is None, "the inline job ran and was deleted"
    assert all(made.executions(job) == ["SUCCEEDED"] for job in ("a1", "a2", "a3", "b2"))
    assert all(made.lease(job).status is LeaseStatus.SUCCEEDED for job in ("a1", "a2", "a3", "b2"))  # type: ignore[union-attr]
    assert made.lease("a1").renewal_count >= 5, "a1 was held for 30 s by 5 s chunks"  # type: ignore[union-attr]


def test_fifo_redelivery_of_a_running_head_starts_nothing_and_holds_the_group() -> None:
    """A lapse shows the running head again: its redelivery adopts the running execution and leaves the
    message in flight (not done), so nothing of its group is handed out behind it."""
    made = run(
        [wait("a1", "A", 10), wait("a2", "A", 1)],
        actions=[(3.0, lambda world: world.redeliver("a1"))],
    )

    assert made.result.violation is None
    assert made.outcomes["a1"] == ["started", "running"], "the redelivery adopted the execution"
    assert made.executions("a1") == ["SUCCEEDED"], "no second execution of a1"
    adopted = made.lease("a1")
    assert adopted is not None and adopted.receive_count == 2 and adopted.attempt == 1
    assert adopted.execution_arn is not None and adopted.execution_arn.endswith("-1")
    assert made.delivered["a2"] == [made.delivered["a2"][0]] and made.delivered["a2"][0] >= made.ended["a1"][-1][0]


def test_fifo_poison_in_the_middle_of_a_group_goes_to_the_fifo_dlq_and_the_group_goes_on() -> None:
    made = run(
        [wait("a1", "A", 1), JobPlan("poison", "raw", {}, 0.0, raw_body="{not json", group="A"), wait("a2", "A", 1)]
    )

    assert made.result.violation is None
    [dead] = made.dead_letters()
    poison = made.message("poison")
    assert dead["body"] == "{not json"
    assert dead["group"] == "A", "a FIFO DLQ keeps the group"
    assert dead["dedup_id"] == poison, "deduplicated by the original message id"
    assert dead["ErrorType"] == "NotJson" and dead["ErrorMessage"].startswith("body is not JSON")
    assert (dead["OriginalMessageId"], dead["SourceQueue"]) == (poison, made.world.queue.arn)
    assert made.lease("poison").status is LeaseStatus.REJECTED  # type: ignore[union-attr]
    assert made.ended["a1"][-1][0] <= made.delivered["poison"][0] <= made.started["a2"][0], "in send order"
    assert made.lease("a2").status is LeaseStatus.SUCCEEDED, "the group went on past the poison"  # type: ignore[union-attr]


def test_fifo_failing_head_goes_alone_to_the_dlq_after_its_attempts_and_the_group_goes_on() -> None:
    """The processor counts attempts, not receives: a1 alone goes to the DLQ after its attempts, and
    the jobs behind it run (in order) once it is there."""
    made = run([wait("a1", "A", 0, fail=True), wait("a2", "A", 0), wait("a3", "A", 0)], {"max_attempts": 3})

    assert made.result.violation is None
    [dead] = made.dead_letters()
    assert (dead["OriginalMessageId"], dead["ErrorType"], dead["group"]) == (
        made.message("a1"),
        "AttemptsExhausted",
        "A",
    )
    assert made.executions("a1") == ["FAILED"] * 3
    assert made.executions("a2") == made.executions("a3") == ["SUCCEEDED"]
    assert made.delivered["a1"][-1] <= made.delivered["a2"][0], "a2 received only once a1 is in the DLQ"
    assert made.ended["a2"][-1][0] <= made.started["a3"][0]


def test_fifo_failed_job_holds_its_group_for_the_fixed_release_delay() -> None:
    """A failed attempt's message is hidden for `fifo_release_delay_s` (not the growing delay of a
    standard queue), and the group waits behind it meanwhile; then the group goes on from that message."""
    seen: dict[str, Any] = {}

    def look(world: World) -> None:  # 30 s after the first attempt failed: within the release delay
        message = world.queue.messages[next(iter(world.job_of_message))]
        seen["hidden_for_s"] = message.visible_at - world.scheduler.now()
        seen["lease"] = lease_of(world, message.message_id)

    made = run(
        [wait("a1", "A", 1, fail=True), wait("a2", "A", 1)],
        {"max_attempts": 3, "fifo_release_delay_s": 60, "release_delay_base_s": 7, "release_delay_cap_s": 900},
        actions=[(30.0, look)],
    )

    assert made.result.violation is None
    lease = seen["lease"]
    assert lease.status is LeaseStatus.RELEASED and lease.release_delay_s == 60, "FIFO: the fixed delay"
    assert 25 < seen["hidden_for_s"] <= 32, "a1 hidden for the rest of its delay"
    [first_end, second_end, _] = [t for t, _ in made.ended["a1"]]
    [_, second, third, dead_lettered] = made.delivered["a1"]
    assert 60 <= second - first_end < 62, "received again once its delay ran out"
    assert 60 <= third - second_end < 62, "the same delay after the second attempt: it does not grow"
    assert made.delivered["a2"][0] >= dead_lettered, "a2 waited behind a1 the whole time"
    assert made.executions("a2") == ["SUCCEEDED"]


def test_fifo_job_waiting_for_its_job_id_holds_its_group_instead_of_sending_a_copy() -> None:
    """Two messages of one job id in two groups, each with a job behind it: the one that finds the job's
    lock held (whichever loses the race for it) holds its own group, hidden for its wait (a copy would go
    to the back of the group), and spends no attempt; the job behind it in its group waits until it has
    run."""
    made = run(
        [
            wait("same-job", "A", 30),
            JobPlan("same-job", "wait", {"seconds": 29}, 0.0, group="B"),
            wait("behind-a", "A", 1),
            wait("behind-b", "B", 1),
        ]
    )

    assert made.result.violation is None
    assert made.outcomes["same-job"][0] == "started" and "held" in made.outcomes["same-job"]
    assert made.world.aws.calls["sqs.SendMessage"] == 0, "no copy was sent to the back of the group"
    waited = [index for index in (0, 1) if len(made.receives[made.message("same-job", index)]) > 1]
    assert len(waited) == 1, "one of the two waited for the other"
    held = made.receives[made.message("same-job", waited[0])]
    assert all(later - earlier >= 15 for earlier, later in itertools.pairwise(held)), "hidden for its wait each time"
    second = made.lease("same-job", waited[0])
    assert second is not None and second.status is LeaseStatus.SUCCEEDED and second.history == (), "no attempt spent"
    behind = "behind-a" if waited[0] == 0 else "behind-b"
    assert made.delivered[behind][0] >= held[-1], "the job behind it was not handed out while it waited"
    assert made.started[behind][0] >= made.ended["same-job"][-1][0]
