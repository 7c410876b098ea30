"""The simulation's scheduler: actors interleave at every wait, in virtual-time order, on one thread."""

from __future__ import annotations

import pytest

from longjobs.sim.scheduler import Crash, Group, Scheduler, Signal

START = 1_000.0


def test_scheduler_actors_interleave_in_virtual_time_order() -> None:
    scheduler = Scheduler(START)
    seen: list[tuple[float, str]] = []

    def actor(name: str, waits: list[float]) -> None:
        for wait in waits:
            scheduler.sleep(wait)
            seen.append((scheduler.now() - START, name))

    scheduler.spawn(lambda: actor("a", [5, 5]))
    scheduler.spawn(lambda: actor("b", [3, 4, 4]))
    scheduler.run(until=START + 100)
    assert seen == [(3, "b"), (5, "a"), (7, "b"), (10, "a"), (11, "b")]


def test_scheduler_kill_throws_into_every_waiting_actor_of_the_group() -> None:
    scheduler = Scheduler(START)
    group = Group("invocation")
    finished: list[str] = []
    unwound: list[str] = []

    def actor(name: str) -> None:
        try:
            scheduler.sleep(60)
            finished.append(name)
        except Crash:
            unwound.append(name)
            raise

    scheduler.spawn(lambda: actor("one"), group=group)
    scheduler.spawn(lambda: actor("two"), group=group)
    scheduler.spawn(lambda: actor("outsider"))
    scheduler.call_at(START + 30, lambda: scheduler.kill(group))
    scheduler.run(until=START + 100)
    assert sorted(unwound) == ["one", "two"]
    assert finished == ["outsider"]


def test_scheduler_a_killed_group_cannot_wait_again() -> None:
    scheduler = Scheduler(START)
    group = Group("invocation")
    group.killed = True
    started: list[bool] = []
    scheduler.spawn(lambda: started.append(True), group=group)
    scheduler.run(until=START + 1)
    assert started == []


def test_scheduler_map_runs_items_concurrently_and_raises_the_first_error() -> None:
    scheduler = Scheduler(START)
    results: list[object] = []

    def slow_double(value: int) -> int:
        scheduler.sleep(10)
        if value == 3:
            raise ValueError("three")
        return value * 2

    def caller() -> None:
        results.append(list(scheduler.map(slow_double, [1, 2])))
        results.append(scheduler.now() - START)  # both slept at once: 10 s, not 20
        try:
            scheduler.map(slow_double, [3, 4])
        except ValueError as exc:
            results.append(str(exc))

    scheduler.spawn(caller)
    scheduler.run(until=START + 100)
    assert results == [[2, 4], 10.0, "three"]


def test_scheduler_wait_for_returns_the_value_or_times_out() -> None:
    scheduler = Scheduler(START)
    event = Signal()
    outcomes: list[object] = []

    def waiter(timeout: float) -> None:
        try:
            outcomes.append(scheduler.wait_for(event, timeout))
        except TimeoutError:
            outcomes.append(("timeout", scheduler.now() - START))

    scheduler.spawn(lambda: waiter(5))
    scheduler.spawn(lambda: waiter(50))
    scheduler.call_at(START + 20, lambda: scheduler.set(event, "done"))
    scheduler.run(until=START + 100)
    assert outcomes == [("timeout", 5.0), "done"]


def test_scheduler_the_loop_itself_cannot_wait() -> None:
    with pytest.raises(RuntimeError, match="only an actor"):
        Scheduler(START).sleep(1)
