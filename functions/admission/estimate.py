"""When a message waiting for a slot can be expected to run, and so how long it waits hidden.

Pure functions of a reading of the type's slots (`TypeSlots`): the holders' ages, and how long each
slot's previous holders held it (the type's recent durations, one per slot). No clock, no AWS.

The model is N servers: each running execution is expected to end `mean - age` from now (at once when
it is already older than the mean), a free slot is free now, and every waiter ahead takes one mean
duration of some slot. The waiter at position p (0: next in line) starts when the (p mod N)-th
soonest slot has served p div N more: `remaining[p % N] + (p // N) * mean`. Without any ended holding
there is no mean: only the waiters that fit the free slots have an estimate (now).
"""

from __future__ import annotations

import math
import random

from functions.admission.slots import TypeSlots

DELAY_STRETCH = (1.2, 1.5)
"""A waiting message hides for its estimate stretched by a random factor in this range: longer than the
estimate on purpose. Whoever frees or finds a slot admits the longest-waiting message in place, while
it is still hidden; its own return is the fallback, and a return before a slot frees costs a receive."""
UNKNOWN_STRETCH = (1.0, 1.25)
MAX_DOUBLINGS = 16


def mean_duration_s(state: TypeSlots) -> float | None:
    """The mean of the slots' most recent holding times; None before any holding ended."""
    samples = state.durations()
    return sum(samples) / len(samples) if samples else None


def _remaining(state: TypeSlots, now: float, mean: float) -> list[float]:
    """When each slot can next be taken, soonest first: free ones now, held ones at `mean - age`."""
    free = [0.0] * (state.limit - state.used)
    return sorted(free + [max(0.0, mean - age) for age in state.ages(now)])[: state.limit]


def expected_start_s(state: TypeSlots, now: float, position: int) -> float | None:
    """Seconds from `now` until the waiter at `position` can be expected to start; None when unknown."""
    mean = mean_duration_s(state)
    if mean is None:
        return 0.0 if position < state.limit - state.used else None
    remaining = _remaining(state, now, mean)
    return remaining[position % state.limit] + (position // state.limit) * mean


def in_flight_target(state: TypeSlots, now: float, horizon_s: float) -> int:
    """How many waiters can be expected to start within `horizon_s`: how many to keep waiting in flight
    (the rest stay parked). Before any holding ended: one per slot."""
    mean = mean_duration_s(state)
    if mean is None or mean <= 0:
        return state.limit
    return sum(math.floor((horizon_s - r) / mean) + 1 for r in _remaining(state, now, mean) if r <= horizon_s)


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
