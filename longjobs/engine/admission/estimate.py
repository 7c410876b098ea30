"""When a message waiting for a slot can be expected to run, and so how long it waits hidden.

Pure functions of a reading of the type's slots (`TypeSlots`): how many are free, how long each
slot's previous holders held it (the type's recent durations, one per slot) and the holders' ages.
No clock, no AWS.

The model: N slots each serve one execution after another, so together they free one slot every
`mean / N` on average, whichever slot it is (many renewal processes together come close to a
Poisson process of that rate). The waiter at position p (0: next in line) takes the (p + 1 - free)-th
slot to free: it can be expected to start `(p + 1 - free) * mean / N` from now, at once when a slot
is free for it. The first holdings to end are the short ones, so until every slot has one the mean
is taken the cautious way: the recent durations and the running holders' ages together, over the
number of durations (time on test per ending). Before any holding ended there is no estimate: only the
waiters that fit the free slots start now, and one waiter per slot is kept in flight.
"""

from __future__ import annotations

import math
import random

from longjobs.engine.admission.slots import TypeSlots

DELAY_STRETCH = (1.2, 1.5)
"""A waiting message hides for its estimate stretched by a random factor in this range, and one
admitter period more: longer than the estimate on purpose. Whoever frees or finds a slot admits the
longest-waiting message in place, while it is still hidden; its own return is the fallback, and a
return before a slot frees costs a receive."""
UNKNOWN_STRETCH = (1.0, 1.25)
MAX_DOUBLINGS = 16


def mean_duration_s(state: TypeSlots, now: float) -> float | None:
    """The type's mean duration, from the slots' most recent holdings; None before any ended."""
    samples = state.durations()
    if not samples:
        return None
    if len(samples) >= state.limit:
        return sum(samples) / len(samples)
    return (sum(samples) + sum(state.ages(now))) / len(samples)


def expected_start_s(state: TypeSlots, now: float, position: int) -> float | None:
    """Seconds from `now` until the waiter at `position` can be expected to start; None when unknown."""
    free = state.limit - state.used
    if position < free:
        return 0.0
    mean = mean_duration_s(state, now)
    if mean is None:
        return None
    return (position + 1 - free) * mean / state.limit


def drain_time_s(state: TypeSlots, now: float, backlog: int) -> float | None:
    """Seconds from `now` until the last of `backlog` waiting messages can be expected to start (0 with
    none waiting); None when unknown. Against the queues' retention it says whether a parked backlog
    drains before SQS drops its oldest copies."""
    if backlog <= 0:
        return 0.0
    return expected_start_s(state, now, backlog - 1)


def in_flight_target(state: TypeSlots, now: float, horizon_s: float) -> int:
    """How many waiters can be expected to start within `horizon_s`: how many to keep waiting in flight
    (the rest stay parked). Before any holding ended: one per slot."""
    mean = mean_duration_s(state, now)
    free = state.limit - state.used
    if mean is None or mean <= 0:
        return state.limit + free
    return free + math.floor(horizon_s * state.limit / mean)


def waiting_delay_s(
    start_s: float | None, *, waits: int, base_s: float, cap_s: float, slack_s: float, rng: random.Random
) -> int:
    """The visibility delay of a message that waits for a slot.

    `start_s`: its expected start (None: unknown). At least `base_s` doubled for each time it waited
    already (so a message whose estimates keep failing comes back less and less often), at most `cap_s`;
    stretched (`DELAY_STRETCH`) and given `slack_s` (the admitter's period) beyond the estimate.
    """
    floor = base_s * 2.0 ** min(waits, MAX_DOUBLINGS)
    if start_s is None:
        delay = floor * rng.uniform(*UNKNOWN_STRETCH)
    else:
        delay = max(floor, start_s * rng.uniform(*DELAY_STRETCH) + slack_s)
    return max(1, math.ceil(min(delay, cap_s)))
