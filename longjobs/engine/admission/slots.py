"""A job type's slots: N lock items, `slot#<type>#0` .. `slot#<type>#<N-1>`, each held by one execution.

The job lock (`longjobs.engine.lease.lock`) is the same mechanism with one item: a slot is taken with a
conditional write naming the execution before it starts, released by that execution's every end (the
workflow's success and failure paths, the watcher, reconciliation, a stop), always conditional on
still naming it, so a release happens at most once and never frees a newer holder.

Why N items and not one counter item with a set of holders: a holding that outlives its execution
(a release lost to a crash) is then one item naming one execution, freed with one conditional write
on that holding alone; and takers pick a free item at random, so concurrent takers rarely write the
same item, where a counter item would take every start and end of the type, one after another. A
reading of all N items is one `BatchGetItem` (consistent), which also gives the estimate its data:
each item keeps how long its previous holder held it (`last_duration_s`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from longjobs.engine.lease.lock import SLOT_PREFIX, Hold, Lock, Locks

TAKE_ATTEMPTS = 4
"""Free slots tried, one after another, when another taker wins the first ones (`admit_in_place`)."""


def slot_key(job_type: str, index: int) -> str:
    return f"{SLOT_PREFIX}{job_type}#{index}"


def slot_keys(job_type: str, limit: int) -> list[str]:
    """The keys of a type's `limit` slots."""
    return [slot_key(job_type, i) for i in range(limit)]


def slot_type(key: str) -> str | None:
    """The job type of a slot key (None when `key` is no slot's)."""
    if not key.startswith(SLOT_PREFIX):
        return None
    job_type, _, index = key.removeprefix(SLOT_PREFIX).rpartition("#")
    return job_type if job_type and index.isdigit() else None


@dataclass(frozen=True)
class TypeSlots:
    """The slots of one type as read at `read_at` (an absent item is a free slot never used)."""

    job_type: str
    limit: int
    locks: dict[str, Lock]
    read_at: float

    @property
    def keys(self) -> list[str]:
        return slot_keys(self.job_type, self.limit)

    @property
    def held(self) -> list[Lock]:
        return [lock for key in self.keys if (lock := self.locks.get(key)) is not None and lock.held]

    @property
    def free_keys(self) -> list[str]:
        return [key for key in self.keys if (lock := self.locks.get(key)) is None or not lock.held]

    @property
    def used(self) -> int:
        return len(self.held)

    def holding_of(self, execution_arn: str) -> str | None:
        """The slot `execution_arn` holds, if any."""
        return next((lock.key for lock in self.held if lock.execution_arn == execution_arn), None)

    def ages(self, now: float) -> list[float]:
        """How long each held slot has been held (its execution's age)."""
        return [max(0.0, now - lock.acquired_at) for lock in self.held]

    def durations(self) -> list[float]:
        """The most recent holding time of each slot: the last holder's, else the one before it."""
        found: list[float] = []
        for key in self.keys:
            lock = self.locks.get(key)
            if lock is None:
                continue
            held_for = lock.held_for_s
            if held_for is not None:
                found.append(held_for)
            elif lock.last_duration_s is not None:
                found.append(lock.last_duration_s)
        return found

    def pick(self, rng: random.Random) -> Hold | None:
        """A free slot to take (at random, so concurrent takers rarely meet on one item), with how long
        its previous holder held it (admission's estimate); None when every slot is held."""
        free = self.free_keys
        if not free:
            return None
        key = rng.choice(free)
        previous = self.locks.get(key)
        last = None
        if previous is not None:
            last = previous.held_for_s if previous.held_for_s is not None else previous.last_duration_s
        return Hold(key, last_duration_s=last)

    @classmethod
    def freed(cls, job_type: str, limit: int, freed: Hold, now: float) -> TypeSlots:
        """What an execution's end tells of its type's slots without reading them: the slot it held is free
        (its holding lasted `freed.last_duration_s`), and every other counts as held. A slot is taken only
        by a conditional write, so a slot that is not free after all (its release lost, or taken since)
        only fails the take; one freed otherwise waits for a pass that reads them all."""
        held = {key: Lock(key, "", "", now, held=True) for key in slot_keys(job_type, limit)}
        duration = freed.last_duration_s
        acquired = now - duration if duration is not None else now
        free = Lock(freed.key, "", "", acquired, held=False, released_at=now if duration is not None else None)
        return cls(job_type, limit, {**held, freed.key: free}, now)

    def without(self, key: str, lock: Lock) -> TypeSlots:
        """This reading with `key` now held as `lock` (after a take)."""
        return TypeSlots(self.job_type, self.limit, {**self.locks, key: lock}, self.read_at)

    def reserved_for(self, message_id: str, now: float) -> TypeSlots:
        """This reading with one free slot counted as held by `message_id` (nothing is written): a message
        ahead in line that its own redelivery is about to admit keeps its slot from those behind it."""
        free = self.free_keys
        if not free:
            return self
        return self.without(free[0], Lock(free[0], message_id, "", now, held=True))


class Slots:
    """Reads and conditional writes of the slot items (lock items of the lease table)."""

    def __init__(self, locks: Locks) -> None:
        self._locks = locks

    @property
    def locks(self) -> Locks:
        return self._locks

    def read(self, job_type: str, limit: int, *, now: float) -> TypeSlots:
        return TypeSlots(job_type, limit, self._locks.get_many(slot_keys(job_type, limit)), now)

    def release(self, key: str, execution_arn: str, *, now: float) -> bool:
        """Free the slot if it still names `execution_arn`."""
        return self._locks.release(key, execution_arn, now=now)
