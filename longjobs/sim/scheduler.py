"""One thread, one virtual clock: every actor of the simulation is a greenlet, and waiting is a switch.

The loop (`Scheduler.run`) pops the earliest event, moves the clock to it and runs it. An actor (a Lambda
invocation, a workflow execution, a Spark run) is a greenlet started by `spawn`; when its code waits on
the clock (`sleep`, the engine's `Clock.sleep`, an AWS call's latency) it parks and the loop goes on, so
any two actors interleave at every wait, in an order drawn from nothing but the event queue. Greenlets
rather than threads or `asyncio`: the engine's code is synchronous and runs unchanged, and no thread
scheduler decides an interleaving, so a seed replays exactly.

An actor belongs to a `Group` (one Lambda invocation, with the greenlets its executor started): killing
the group throws `Crash` into each of them where it waits, as a function that dies or hits its timeout.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from greenlet import greenlet

T = TypeVar("T")
R = TypeVar("R")


class Crash(BaseException):
    """Thrown into an actor that dies (a function crash or timeout). A BaseException, as GreenletExit is,
    so that the engine's `except Exception` handlers let it through, as they would a frozen sandbox."""


@dataclass(eq=False)
class Group:
    """The greenlets of one invocation; `killed` once it died."""

    name: str
    protected: bool = False  # no fault may strike it (the world keeps faults within the design's bounds)
    members: list[greenlet] = field(default_factory=list)
    killed: bool = False


@dataclass(eq=False)
class _Waiter:
    task: greenlet
    ticket: int


class Scheduler:
    """The event loop and the virtual clock (seconds since the epoch, as `time.time()`)."""

    def __init__(self, start: float) -> None:
        self._now = start
        self._events: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._tickets = itertools.count(1)
        self._waiting: dict[greenlet, int] = {}  # parked actor -> the ticket that may wake it
        self._groups: dict[greenlet, Group] = {}
        self._loop = greenlet.getcurrent()
        self.steps = 0

    # -- the clock ------------------------------------------------------------------------------------------

    def now(self) -> float:
        return self._now

    def sleep(self, seconds: float) -> None:
        """Park the current actor for `seconds` of virtual time (the engine's `Clock.sleep`)."""
        ticket = self._park()
        task = greenlet.getcurrent()
        self.call_at(self._now + max(0.0, seconds), lambda: self._wake(task, ticket))
        self._yield()

    # -- events and actors ----------------------------------------------------------------------------------

    def call_at(self, when: float, action: Callable[[], None]) -> None:
        """Run `action` (in the loop, not as an actor: it must not wait) at virtual time `when`."""
        heapq.heappush(self._events, (max(when, self._now), next(self._seq), action))

    def spawn(self, run: Callable[[], Any], *, group: Group | None = None, at: float | None = None) -> greenlet:
        """Start `run` as an actor at `at` (now by default), in `group` (the caller's when None)."""
        task = greenlet(run, parent=self._loop)
        owner = group if group is not None else self._groups.get(greenlet.getcurrent())
        if owner is not None:
            owner.members.append(task)
            self._groups[task] = owner
        self.call_at(self._now if at is None else at, lambda: self._start(task))
        return task

    def kill(self, group: Group) -> None:
        """Throw `Crash` into every live actor of `group` (from the loop: an event or a hook)."""
        group.killed = True
        for task in list(group.members):
            if not task.dead and task in self._waiting:
                self._waiting.pop(task)
                self._switch(partial(task.throw, Crash(group.name)))

    def group_of_current(self) -> Group | None:
        return self._groups.get(greenlet.getcurrent())

    def wait_for(self, event: Signal, timeout_s: float | None = None) -> Any:
        """Park until `event` is set (its value) or `timeout_s` passes (`TimeoutError`)."""
        if event.is_set:
            return event.value
        task = greenlet.getcurrent()
        ticket = self._park()
        event.waiters.append(_Waiter(task, ticket))
        if timeout_s is not None:
            self.call_at(self._now + timeout_s, lambda: self._wake(task, ticket, TimeoutError()))
        self._yield()
        return event.value

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """`Executor.map` on actors of the caller's group: the engine's parallel calls, interleaved."""
        todo = list(items)
        results: list[Any] = [None] * len(todo)
        errors: list[BaseException | None] = [None] * len(todo)
        done = Signal()
        left = [len(todo)]

        def one(index: int, item: T) -> None:
            try:
                results[index] = fn(item)
            except Exception as exc:
                errors[index] = exc
            finally:
                left[0] -= 1
                if left[0] == 0:
                    self.set(done, True)

        for index, item in enumerate(todo):
            self.spawn(lambda i=index, x=item: one(i, x))  # type: ignore[misc]
        if todo:
            self.wait_for(done)
        for error in errors:
            if error is not None:
                raise error
        return iter(results)

    def set(self, event: Signal, value: Any = None) -> None:
        """Set `event` and wake its waiters (at the current time, after the caller)."""
        if event.is_set:
            return
        event.is_set, event.value = True, value
        for waiter in event.waiters:
            self.call_at(self._now, lambda w=waiter: self._wake(w.task, w.ticket))  # type: ignore[misc]
        event.waiters.clear()

    def run(self, *, until: float, stop: Callable[[], bool] = lambda: False) -> None:
        """Run events in time order until none is left, the next is after `until`, or `stop()`."""
        while self._events and not stop():
            when, _, action = self._events[0]
            if when > until:
                break
            heapq.heappop(self._events)
            self._now = when
            self.steps += 1
            action()

    # -- switching ------------------------------------------------------------------------------------------

    def _park(self) -> int:
        task = greenlet.getcurrent()
        if task is self._loop:
            raise RuntimeError("the loop cannot wait: only an actor (spawn) can")
        group = self._groups.get(task)
        if group is not None and group.killed:
            raise Crash(group.name)
        ticket = next(self._tickets)
        self._waiting[task] = ticket
        return ticket

    def _yield(self) -> None:
        value = self._loop.switch()
        if isinstance(value, BaseException):
            raise value

    def _wake(self, task: greenlet, ticket: int, value: Any = None) -> None:
        if task.dead or self._waiting.get(task) != ticket:
            return  # woken already (the event came first, or it was killed)
        del self._waiting[task]
        self._switch(lambda: task.switch(value))

    def _start(self, task: greenlet) -> None:
        group = self._groups.get(task)
        if group is not None and group.killed:
            return
        self._switch(task.switch)

    def _switch(self, go: Callable[[], Any]) -> None:
        try:
            go()
        except Crash:
            pass  # an actor died: its group is over
        finally:
            if greenlet.getcurrent() is not self._loop:
                raise RuntimeError("an actor returned control outside the loop")


@dataclass(eq=False)
class Signal:
    """A one-shot event an actor can wait on (`Scheduler.wait_for`), set once with a value."""

    is_set: bool = False
    value: Any = None
    waiters: list[_Waiter] = field(default_factory=list)


class VirtualClock:
    """The engine's `Clock` on the scheduler: `now` is virtual, `sleep` parks the actor."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def now(self) -> float:
        return self._scheduler.now()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._scheduler.sleep(seconds)
